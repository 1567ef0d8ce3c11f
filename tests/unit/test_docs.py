"""The documentation agrees with the code: the configuration reference is the one
generated from ``fiber.config.Config`` (docs/config_reference.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import support

ROOT = support.REPO


def test_the_configuration_reference_is_generated_from_the_config_definition():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "config_reference.py"),
                          "--check", "docs/configuration.md", "README.md"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr + out.stdout


def test_the_generator_sees_every_key_and_its_meaning():
    import dataclasses
    import runpy

    import fiber.config

    gen = runpy.run_path(os.path.join(ROOT, "docs", "config_reference.py"))
    docs = gen["field_docs"]()
    keys = [f.name for f in dataclasses.fields(fiber.config.Config)]
    assert sorted(docs) == sorted(keys)
    assert all(docs[k] for k in keys), [k for k in keys if not docs[k]]
