"""This package's distribution name and version (pyproject.toml reads the version here), how
to install it, and the check for another distribution of the same import name."""

import os
import warnings
from typing import List

#: The distribution that installs this ``fiber`` (the original fiber's is ``fiber``).
DISTRIBUTION = "fiber-cluster"
__version__ = "0.1.0"
#: The wheel ``python -m build`` makes of this package (and ``pip wheel .``).
WHEEL = f"{DISTRIBUTION.replace('-', '_')}-{__version__}-py3-none-any.whl"


def install_hint(extra: str = "") -> str:
    """The pip commands that install this package, with its optional ``extra``, for an
    error message to give: fiber-cluster is not on PyPI yet, so they take fiber's checkout
    or the wheel built from it, not a name from an index."""
    spec = f"[{extra}]" if extra else ""
    return f"pip install '.{spec}' in fiber's checkout, or pip install '{WHEEL}{spec}'"


def other_distributions(package_dir: str) -> List[str]:
    """Metadata folders of another distribution of the import name ``fiber`` beside this
    package (the original fiber's ``fiber-0.2.1.dist-info``): installing one over the other
    overwrites its files, and uninstalling one leaves the other broken."""
    site = os.path.dirname(package_dir)
    try:
        names = os.listdir(site)
    except OSError:
        return []
    return sorted(n for n in names if n.lower().startswith("fiber-")
                  and n.endswith((".dist-info", ".egg-info")))


def warn_if_shadowed(package_dir: str) -> None:
    """Warn once, in the main program only, when `other_distributions` finds one."""
    if os.environ.get("FIBER_PARENT"):
        return
    others = other_distributions(package_dir)
    if others:
        warnings.warn(
            f"another distribution of the import name 'fiber' is installed beside "
            f"{DISTRIBUTION} in {os.path.dirname(package_dir)} ({', '.join(others)}: the "
            f"original fiber?). Both write the same files: pip uninstall both, then install "
            f"{DISTRIBUTION} alone ({install_hint()}; fiber --version names the one in use)",
            UserWarning, stacklevel=3)
