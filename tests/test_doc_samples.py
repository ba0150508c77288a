"""Every YAML sample in README.md, docs/CONFIG.md and docs/MITM.md passes `ferry check` as
written, from the repository's root (a fresh clone: paths are under the repo, /tmp or the
system's CA bundle), and docs/CONFIG.md's copy of the built-in configuration is what
`ferry check` (no file) prints.

A deliberately partial snippet starts with the line `# fragment` (say why after it); it is
not checked. To refresh the built-in copy after changing the embedded configuration:

    /usr/bin/python3 tests/test_doc_samples.py --write-builtin [path/to/ferry]
"""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "docs/CONFIG.md", "docs/MITM.md", "docs/OPERATIONS.md"]
BUILTIN_HEADING = "## Example: the built-in configuration"
FRAGMENT = "# fragment"


def ferry_bin():
    return os.environ.get("FERRY_BIN", str(ROOT / "build" / "ferry"))


def samples(doc):
    """(line number of the opening fence, text) of each ```yaml block"""
    lines = (ROOT / doc).read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```yaml":
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            out.append((start, "\n".join(body) + "\n"))
        i += 1
    return out


def builtin_block(text):
    """(start, end) line indexes of the yaml block under BUILTIN_HEADING in CONFIG.md"""
    lines = text.split("\n")
    h = lines.index(BUILTIN_HEADING)
    start = next(i for i in range(h, len(lines)) if lines[i].strip() == "```yaml") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "```")
    return lines, start, end


def builtin(ferry, home):
    env = dict(os.environ, HOME=str(home))
    env.pop("XDG_DATA_HOME", None)
    p = subprocess.run([ferry, "check"], capture_output=True, text=True, timeout=15, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout


def all_samples():
    return [(doc, line, text) for doc in DOCS for line, text in samples(doc)]


if __name__ != "__main__":
    import pytest

    @pytest.mark.parametrize("doc,line,text", all_samples(),
                             ids=[f"{d}:{l}" for d, l, _ in all_samples()])
    def test_doc_sample_checks(doc, line, text, tmp_path):
        if text.startswith(FRAGMENT):
            pytest.skip(f"{doc}:{line} is marked {FRAGMENT}")
        cfg = tmp_path / "sample.yaml"
        cfg.write_text(text)
        env = dict(os.environ, HOME=str(tmp_path))
        env.pop("XDG_DATA_HOME", None)
        p = subprocess.run([ferry_bin(), "check", "-c", str(cfg)], capture_output=True,
                           text=True, timeout=15, cwd=ROOT, env=env)
        assert p.returncode == 0, f"the sample at {doc}:{line} does not check:\n{p.stderr}"

    def test_doc_samples_fragments_are_few():
        frags = [(d, l) for d, l, t in all_samples() if t.startswith(FRAGMENT)]
        assert len(frags) <= 3, frags
        assert len(all_samples()) >= 6

    def test_doc_builtin_copy_is_current(tmp_path):
        lines, start, end = builtin_block((ROOT / "docs/CONFIG.md").read_text())
        copy = "\n".join(lines[start:end]) + "\n"
        assert copy == builtin(ferry_bin(), tmp_path), (
            "docs/CONFIG.md's built-in configuration is out of date; run "
            "/usr/bin/python3 tests/test_doc_samples.py --write-builtin")

    def test_doc_reference_is_generated_from_the_tables():
        marker = "<!-- Everything below is generated from the directive tables by `ferry doc-config`"
        text = (ROOT / "docs/CONFIG.md").read_text()
        assert marker in text
        tail = text[text.index(marker):]
        tail = tail[tail.index("-->") + 3:].lstrip("\n")
        p = subprocess.run([ferry_bin(), "doc-config"], capture_output=True, text=True, timeout=15)
        assert p.returncode == 0, p.stderr
        assert tail == p.stdout, ("docs/CONFIG.md's reference is not what the directive tables "
                                  "say; run tools/regen-config-doc.sh")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "--write-builtin":
        sys.exit(__doc__)
    import tempfile
    ferry = sys.argv[2] if len(sys.argv) > 2 else ferry_bin()
    path = ROOT / "docs/CONFIG.md"
    with tempfile.TemporaryDirectory() as home:
        text = builtin(ferry, home)
    lines, start, end = builtin_block(path.read_text())
    path.write_text("\n".join(lines[:start] + text.rstrip("\n").split("\n") + lines[end:]))
    print(f"{path}: built-in configuration refreshed")
