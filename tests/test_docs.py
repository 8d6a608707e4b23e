"""The user documentation cannot rot: the generated reference pages must
match the code, and the Python API page's examples must run."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pynnet3.testing import gen_docs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.mark.parametrize("page", sorted(gen_docs.PAGES))
def test_generated_page_is_up_to_date(page):
    filename, render = gen_docs.PAGES[page]
    committed = (DOCS / filename).read_text(encoding="utf-8")
    assert committed == render(), (
        f"docs/{filename} is out of date: run {gen_docs.REGENERATE_COMMAND} to update")


def test_cli_reference_lists_every_binary_and_option():
    from pynnet3.cli import BINARIES

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    for name, entry in BINARIES.items():
        assert f"\n## {name}\n" in text, name
        command = gen_docs.binary_command(entry)
        for param in command.params:
            if getattr(param, "opts", None) and param.param_type_name == "option":
                assert f"`{param.opts[0]}`" in text.split(f"\n## {name}\n")[1].split("\n## ")[0]


def test_component_reference_matches_kaldi_keys():
    """A few entries checked by hand against Kaldi's InitFromConfig
    (nnet-simple-component.cc, nnet-convolutional-component.cc): the static
    reading of the source finds the keys that Kaldi's component reads,
    follows helper calls and constant arguments, and evaluates defaults."""
    from pynnet3.nnet.components import base

    def keys(name):
        return {k.key: k.default for k in gen_docs.component_config_keys(
            base.component_class(name))}

    affine = keys("AffineComponent")
    # Kaldi's AffineComponent reads no bias-mean (the natural-gradient one does)
    assert set(affine) == {"learning-rate", "learning-rate-factor", "max-change",
                           "l2-regularize", "matrix", "input-dim", "output-dim",
                           "param-stddev", "bias-stddev", "orthonormal-constraint"}
    assert affine["param-stddev"] == "1.0 / math.sqrt(input_dim)"
    assert affine["orthonormal-constraint"] == "0.0"
    assert "bias-mean" in keys("NaturalGradientAffineComponent")
    pool = keys("MaxpoolingComponent")  # keys read in a comprehension over a tuple
    assert set(pool) == {f"{a}-{b}-{c}" for a, c in (("input", "dim"), ("pool", "size"),
                                                       ("pool", "step"))
                         for b in "xyz"}
    tdnn = keys("TdnnComponent")
    assert tdnn["use-bias"] == "true" and tdnn["time-offsets"] is None
    assert keys("CompositeComponent")["max-rows-process"] == "4096"
    assert "componentN" in keys("CompositeComponent")
    assert keys("BatchNormComponent") == {"dim": None, "block-dim": "-1", "epsilon": "0.001",
                                          "target-rms": "1.0", "test-mode": "false"}


def test_check_mode_reports_the_command(tmp_path):
    (tmp_path / "cli.md").write_text("stale\n")
    proc = subprocess.run([sys.executable, "-m", "pynnet3.testing.gen_docs", "--check",
                           "--docs-dir", str(tmp_path), "cli"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert f"run {gen_docs.REGENERATE_COMMAND} to update" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "pynnet3.testing.gen_docs",
                           "--docs-dir", str(tmp_path), "cli"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert (tmp_path / "cli.md").read_text() == gen_docs.render_cli()


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def test_python_api_page_runs(tmp_path):
    """The Python code blocks of docs/python-api.md, run in order as one
    script in an empty directory, print the output the page shows."""
    import os

    page = (DOCS / "python-api.md").read_text(encoding="utf-8")
    code = "\n".join(_blocks(page, "python"))
    assert "CachingCompiler" in code and "iter_examples" in code
    expected = _blocks(page, "text")
    assert len(expected) == 1
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == expected[0]
    # what it wrote is a Kaldi network and an egs archive
    assert (tmp_path / "example.raw").read_bytes().startswith(b"\0B<Nnet3>")
    assert (tmp_path / "example.egs").read_bytes().startswith(b"utt1-0 \0B<Nnet3Eg>")


def test_readme_links_every_page_and_links_resolve():
    """Every page in docs/ is reachable from the README, every relative link
    of the README and the pages names an existing file, and nothing a user
    reads points at the developers' reference folder beside the checkout."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in sorted(DOCS.glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"README does not link docs/{page.name}"
    for path in [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        assert "../shared" not in text and "ARCHITECTURE.md" not in text, path.name
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (path.parent / target).exists(), f"{path.name}: broken link {target}"
