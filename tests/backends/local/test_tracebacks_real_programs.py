"""A remote traceback names the user's file and line, and shows the source line, in the two
ways users run fiber that compile nothing by hand: a script (``python prog.py``) and a
notebook whose cells run in a real Jupyter kernel (nbclient). With any cloudpickle from the
floor of ``pyproject.toml`` to the newest (3.1.3 renamed every shipped code object's file to
``<dynamic-code>``): CI runs this module in its newest and floor stages too."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.timeout(240)

PROGRAM = '''
import fiber


def parse(line):
    fields = line.split(",")
    return int(fields[1])


def target():
    lookup = lambda key: {}[key]  # a lambda of a function of __main__
    lookup("missing-key")


if __name__ == "__main__":
    with fiber.Pool(1) as pool:
        try:
            pool.map(parse, ["no comma"])
        except IndexError as e:
            print("REMOTE TRACEBACK:", e.__cause__.tb)
    p = fiber.Process(target=target)
    p.start()
    p.join(60)
    print("EXIT CODE:", p.exitcode)
'''


def test_a_script_run_as_python_prog_py_shows_file_line_and_source(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    out = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    task_tb = out.stdout.split("REMOTE TRACEBACK:", 1)[1]
    assert f'File "{prog}", line 7, in parse' in task_tb, task_tb
    assert "return int(fields[1])" in task_tb, task_tb
    assert "<dynamic-code>" not in out.stdout + out.stderr
    assert "EXIT CODE: 1" in out.stdout
    # the Process's traceback, printed by the job and forwarded to this program's stderr
    assert f'File "{prog}", line 12, in target' in out.stderr, out.stderr
    assert f'File "{prog}", line 11, in <lambda>' in out.stderr, out.stderr
    assert 'lookup = lambda key: {}[key]' in out.stderr, out.stderr
    assert "KeyError: 'missing-key'" in out.stderr


CELLS = [
    "import fiber",
    textwrap.dedent('''\
        def bad(x):
            y = x * 2
            raise ValueError(f"bad {y}")


        def worker_target():
            return bad(1)
        '''),
    # One cell starts fiber's hub and its jobs: ipykernel 6 shows what a thread writes
    # under the cell that started the thread (7 under the running cell), and nbclient
    # keeps only the output of the cell it runs.
    textwrap.dedent('''\
        with fiber.Pool(1) as pool:
            try:
                pool.map(bad, [21])
            except ValueError as e:
                print(e.__cause__.tb)
        p = fiber.Process(target=worker_target)
        p.start()
        p.join(60)
        print("exit code", p.exitcode)
        '''),
]


def _stream_text(cell: nbformat.NotebookNode, name: str) -> str:
    return "".join(o.get("text", "") for o in cell.outputs
                   if o.output_type == "stream" and o.name == name)


def test_a_notebook_cells_functions_show_file_line_and_source(tmp_path):
    """The cell's file is the kernel's (``/tmp/ipykernel_<pid>/<hash>.py``), which no job
    has: the line comes from the kernel, through the job's parent."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    client = NotebookClient(nb, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env={**os.environ})  # the kernel takes this Python's sys.path
    out = _stream_text(nb.cells[2], "stdout")
    task_tb = out.split("exit code")[0]
    assert "line 3, in bad" in task_tb, task_tb
    assert 'raise ValueError(f"bad {y}")' in task_tb, task_tb
    assert "ipykernel_" in task_tb and "<dynamic-code>" not in task_tb, task_tb
    process_err = _stream_text(nb.cells[2], "stderr")
    assert "line 7, in worker_target" in process_err, process_err
    assert "return bad(1)" in process_err and "line 3, in bad" in process_err, process_err
    assert "ValueError: bad 2" in process_err
    assert "exit code 1" in out
