"""Reproducible runs: the same corpus and seed give a byte-identical tokenizer.json, the same
pretraining instances and bit-identical weights; the run directory records what repeats a run."""

from __future__ import annotations

import hashlib

import pytest

from bertfamily.resources.cache import fetch
from bertfamily.tokenization.training import train_tokenizer


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_tokenizer_training_is_byte_identical(tmp_path, kind):
    # a real novel: with tokenizers' own WordPieceTrainer the ids of the ## characters (and
    # the merges tied on them), with its UnigramTrainer the scores and the order of pieces,
    # changed between two trainings of this file
    corpus = fetch("janeausten") / "persuasion.txt"
    digests = set()
    for i in range(2):
        train_tokenizer(corpus, kind, 1500, output_dir=tmp_path / str(i))
        digests.add(_sha(tmp_path / str(i) / "tokenizer.json"))
    assert len(digests) == 1


def test_wordpiece_vocabulary_is_that_of_the_wordpiece_trainer():
    """The tokens of tokenizers' WordPieceTrainer: the same alphabet (plain and ``##``), the
    same merges but where that trainer breaks ties between equal counts by its random ids."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    text = (fetch("janeausten") / "persuasion.txt").read_text(encoding="utf-8").splitlines()
    text = [line for line in text[:3000] if line.strip()] + ["Xerxes owned 3 boxes."]
    ours = train_tokenizer(text, "wordpiece", 800, min_frequency=2)
    ref = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    ref.normalizer = normalizers.BertNormalizer(lowercase=True)
    ref.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(
        vocab_size=800, min_frequency=2, special_tokens=specials, show_progress=False
    )
    ref.train_from_iterator(text, trainer=trainer)
    vocab, theirs = ours.backend.get_vocab(with_added_tokens=False), ref.get_vocab()
    order = sorted(vocab, key=vocab.get)
    assert order[:5] == specials
    alphabet = {t for t in vocab if len(t.removeprefix("##")) == 1}
    assert alphabet == {t for t in theirs if len(t.removeprefix("##")) == 1}
    assert "x" in vocab and "##x" in vocab  # every character also starts a word
    assert len(set(vocab) & set(theirs)) >= 0.98 * len(theirs)
    # the ## alphabet follows the plain one, then the merges
    assert order.index("z") < order.index("##a") < order.index("th")


FACTS = ["the sky is blue .", "the grass is green .", "the sun is yellow .", "the snow is white ."]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("repro")
    docs = ["\n".join(FACTS[(i + j) % 4] for j in range(5)) for i in range(24)]
    (root / "toy.txt").write_text("\n\n".join(docs) + "\n")
    train_tokenizer(root / "toy.txt", "wordpiece", 100, min_frequency=1, output_dir=root / "tok")
    return root


def _pretrain(cli, root, out, seed, *extra):
    res = cli(
        "pretrain",
        root / "toy.txt",
        "-o",
        out,
        "--tokenizer",
        root / "tok",
        "--preset",
        "tiny-bert",
        "--objectives",
        "mlm",
        "--max-length",
        "24",
        "--max-steps",
        "6",
        "--batch-size",
        "4",
        "--seed",
        str(seed),
        "--threads",
        "1",
        "--device",
        "cpu",
        *extra,
    )
    assert res.exit_code == 0, res.output
    return out / "model"


def _weights(model_dir):
    from safetensors.torch import load_file

    path = model_dir / "model.safetensors"
    return path.read_bytes(), load_file(path)


@pytest.mark.slow
def test_same_seed_same_weights_other_seed_other_weights(cli, toy, tmp_path):
    import torch

    a = _weights(_pretrain(cli, toy, tmp_path / "a", 3))
    b = _weights(_pretrain(cli, toy, tmp_path / "b", 3))
    c = _weights(_pretrain(cli, toy, tmp_path / "c", 4))
    assert a[0] == b[0]  # bit-identical file
    assert a[1].keys() == c[1].keys()
    assert not all(torch.equal(a[1][k], c[1][k]) for k in a[1])
    # the logged losses too, step by step
    from bertfamily.train.rundir import read_metrics

    logs = [
        [(m["step"], m["split"], m.get("loss"), m.get("accuracy")) for m in read_metrics(p)]
        for p in (tmp_path / "a" / "metrics.jsonl", tmp_path / "b" / "metrics.jsonl")
    ]
    assert logs[0] == logs[1] and any(loss is not None for _, _, loss, _ in logs[0])


def test_run_record_fields(cli, toy, tmp_path):
    import json
    import sys

    import tokenizers
    import torch

    _pretrain(cli, toy, tmp_path / "run", 11, "--max-steps", "1")
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["seed"] == 11
    assert record["argv"] == sys.argv  # what the process was started with
    assert record["threads"]["torch_intra_op"] == 1  # --threads 1, while training
    versions = record["versions"]
    assert torch.__version__.startswith(versions["torch"].split("+")[0])
    assert versions["tokenizers"] == tokenizers.__version__
    assert versions["bertfamily"] and versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert "transformers" in versions
    config = record["config"]
    assert config["train"]["seed"] == 11 and config["train"]["max_steps"] == 1
    assert config["pretrain"]["max_length"] == 24 and config["model"]["hidden_size"] > 0
    assert config["objectives"] == ["mlm"]
    by_path = {d["path"]: d for d in record["data"]}
    corpus = str((toy / "toy.txt").resolve())
    assert by_path[corpus]["sha256"] == _sha(toy / "toy.txt")
    assert by_path[str((toy / "tok" / "tokenizer.json").resolve())]["sha256"] == _sha(
        toy / "tok" / "tokenizer.json"
    )


def test_unigram_pieces_and_errors():
    text = (fetch("janeausten") / "persuasion.txt").read_text(encoding="utf-8").splitlines()
    tok = train_tokenizer(text[:1500], "unigram", 500)
    vocab = tok.backend.get_vocab(with_added_tokens=False)
    order = sorted(vocab, key=vocab.get)
    assert order[:5] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert len(vocab) == 500 and order.index("▁the") < 10  # the most frequent word, ▁-prefixed
    assert tok.tokenize("The captain said")[:2] == ["▁the", "▁captain"]
    with pytest.raises(ValueError, match="Unigram"):  # fewer pieces than characters
        train_tokenizer(["".join(chr(0x4E00 + i) for i in range(300))], "unigram", 40)


def test_same_seed_same_instances_and_masks(toy, tmp_path):
    """Instances (packing, NSP pairs) and dynamic masking depend on the seed alone."""
    import torch

    from bertfamily.objectives.masking import MaskingConfig
    from bertfamily.recipes.common import mlm_data
    from bertfamily.tokenization import load_tokenizer
    from bertfamily.train import TrainConfig
    from bertfamily.train.distributed import DistInfo

    tok = load_tokenizer(toy / "tok")

    def data(seed):
        train = TrainConfig(output_dir=tmp_path, batch_size=4, seed=seed)
        d = mlm_data(
            [toy / "toy.txt"], tok, train, DistInfo(), kind="nsp", max_length=24,
            masking=MaskingConfig(), eval_documents=4, eval_batches=2,
        )  # fmt: skip
        return [i.input_ids.tolist() for i in d.train_instances], list(d.source(0)), d.eval_batches

    a, b, c = data(5), data(5), data(6)
    assert a[0] == b[0] and a[0] != c[0]  # NSP pairs: random next sentences, from the seed
    for x, y in zip(a[1] + a[2], b[1] + b[2]):
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert not all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a[1], c[1]))


def test_the_command_and_the_python_call_are_the_same_run(cli, toy, tmp_path):
    """One training vocabulary (issue #27): `bertfamily pretrain` and `pretrain(cfg, **fields)`
    with the same arguments start from the same defaults (`recipes.defaults.TRAIN_DEFAULTS`),
    so their run.json agree and the weights are bit-identical."""
    import json

    import torch

    from bertfamily.recipes.defaults import TRAIN_DEFAULTS
    from bertfamily.recipes.pretrain import PretrainConfig, pretrain

    _pretrain(cli, toy, tmp_path / "cli", 5, "--max-steps", "2")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as --threads 1
    try:
        pretrain(
            PretrainConfig(
                corpus=[str(toy / "toy.txt")],
                tokenizer=str(toy / "tok"),
                preset="tiny-bert",
                objectives=["mlm"],
                max_length=24,
            ),
            output_dir=tmp_path / "py",
            max_steps=2,
            batch_size=4,
            seed=5,
            device="cpu",
        )
    finally:
        torch.set_num_threads(threads)
    runs = [json.loads((tmp_path / d / "run.json").read_text())["config"] for d in ("cli", "py")]
    for run in runs:
        run["train"].pop("output_dir")
    assert runs[0]["train"] == runs[1]["train"]
    assert runs[0]["model"] == runs[1]["model"]
    train = runs[1]["train"]
    assert train["learning_rate"] == TRAIN_DEFAULTS["pretrain"]["learning_rate"] == 1e-3
    assert train["warmup_ratio"] == 0.05 and train["metric_for_best"] == "loss"
    assert _weights(tmp_path / "cli" / "model")[0] == _weights(tmp_path / "py" / "model")[0]


def test_init_from_with_size_overrides_is_refused(cli, toy, tmp_path):
    model = _pretrain(cli, toy, tmp_path / "base", 1, "--max-steps", "1")
    res = cli(
        "pretrain", toy / "toy.txt", "-o", tmp_path / "more", "--init-from", model,
        "--hidden", "64", "--max-steps", "1", "--device", "cpu",
    )  # fmt: skip
    assert res.exit_code == 2
    assert "--init-from" in res.output and "hidden_size" in res.output
    assert not (tmp_path / "more" / "model").exists()


def test_recipes_refuse_unknown_training_fields(tmp_path):
    from bertfamily.errors import ArgumentTypeError
    from bertfamily.recipes.common import train_config

    with pytest.raises(ArgumentTypeError, match="learning_rat"):
        train_config("pretrain", output_dir=tmp_path, learning_rat=1e-3)
    cfg = train_config("finetune", output_dir=tmp_path, seed=3)
    assert (cfg.learning_rate, cfg.warmup_ratio, cfg.seed) == (5e-5, 0.1, 3)
