"""This package's name on PyPI and its version (pyproject.toml reads the version here)."""

#: The distribution that installs this ``fiber`` (the original fiber's is ``fiber``).
DISTRIBUTION = "fiber-cluster"
__version__ = "0.1.0"
