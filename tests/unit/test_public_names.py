"""Every public name of multiprocessing is provided by fiber, or listed with a reason."""

from __future__ import annotations

import multiprocessing

import fiber
from fiber._compat import UNSUPPORTED


def test_every_multiprocessing_name_is_provided_or_explained():
    missing = [n for n in multiprocessing.__all__
               if not hasattr(fiber, n) and n not in UNSUPPORTED]
    assert not missing, f"neither provided nor listed as unsupported: {missing}"


def test_unsupported_list_is_honest():
    provided_but_listed = [n for n in UNSUPPORTED if hasattr(fiber, n)]
    assert not provided_but_listed, provided_but_listed
    assert all(reason.strip() for reason in UNSUPPORTED.values())


def test_fiber_all_is_importable():
    for name in fiber.__all__:
        assert hasattr(fiber, name), name
