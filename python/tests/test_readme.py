"""The README's Python examples, run as printed, one after the other (the second reads the
first's model and data), in a scratch directory."""

import pathlib
import re

import pytest

pytest.importorskip("torch")

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_the_readmes_python_runs_as_printed(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    scope = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), scope)
    assert (tmp_path / "runs" / "x" / "metrics.jsonl").is_file()
    recipe = (tmp_path / "plan" / "plan-recipe.json").read_text()
    assert '"keep"' in recipe and "nvfp4" in recipe
    assert "grad err" in capsys.readouterr().out  # the table printed
