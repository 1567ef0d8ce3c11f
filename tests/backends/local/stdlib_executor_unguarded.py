"""A program that uses a ProcessPoolExecutor at module level, without the
``if __name__ == "__main__":`` guard. A job handed multiprocessing's objects imports the
main script, as multiprocessing's spawn does, so without a check each job would start
more jobs; the job must fail clearly instead, and the program see a broken pool."""

import concurrent.futures as cf

import fiber


def square(x: int) -> int:
    return x * x


with cf.ProcessPoolExecutor(1, mp_context=fiber.get_context()) as ex:
    try:
        print("result", ex.submit(square, 3).result(120))
    except cf.process.BrokenProcessPool as e:
        print("broken", e)
