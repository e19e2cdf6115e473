"""Shared fixtures: the mixprec binary the tests compare against.

The binary is $MIXPREC_BIN, else target/release/mixprec of the repository (scripts/python-test
builds it); the tests that need it are skipped, saying so, when neither exists.
"""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli():
    path = pathlib.Path(os.environ.get("MIXPREC_BIN", ROOT / "target" / "release" / "mixprec"))
    if not path.is_file():
        pytest.skip(f"no mixprec binary at {path} (run scripts/python-test, or set MIXPREC_BIN)")

    def run(*args, stdin=""):
        return subprocess.run(
            [str(path), *args], input=stdin, capture_output=True, text=True, check=False
        )

    return run
