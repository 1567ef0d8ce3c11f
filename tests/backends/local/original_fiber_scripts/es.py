"""Evolution strategies on a quadratic, in the style of the original fiber's
examples/gecco-2020/es.py (written here): a Pool made once and never closed, a
functools.partial of a module function mapped over copies of the parameters."""

import functools

import numpy as np

import fiber

TARGET = np.array([3.0, -2.0, 0.5])


def fitness(theta):
    return -float(np.sum((theta - TARGET) ** 2))


def evaluate(dim, sigma, theta):
    noise = np.random.randn(dim)
    return fitness(theta + sigma * noise), noise


def es(theta, workers=8, sigma=0.1, alpha=0.05, iterations=40):
    pool = fiber.Pool(4)
    task = functools.partial(evaluate, theta.shape[0], sigma)
    for t in range(iterations):
        results = pool.map(task, [theta] * workers)
        rewards = np.array([r for r, _ in results])
        noises = np.array([n for _, n in results])
        ranked = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
        theta = theta + alpha / (workers * sigma) * ranked @ noises
        if t % 10 == 0:
            print(t, fitness(theta))
    return theta


def main():
    np.random.seed(0)
    start = np.zeros(3)
    result = es(start)
    print("Result", result)
    assert fitness(result) > fitness(start)


if __name__ == "__main__":
    main()
