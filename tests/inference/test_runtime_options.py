"""``--runtime`` on every command that embeds (embed, search, index build/add, serve): refused
before anything loads where it cannot apply, never silently dropped. These run without the
``openvino`` package (the runs with it are in tests/inference/test_openvino.py)."""

from __future__ import annotations

import pytest

from helpers import save_tiny, save_tiny_splade


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, minilm_dir):
    root = tmp_path_factory.mktemp("runtime")
    (root / "docs.txt").write_text("a cat sleeps\nstock markets fell\n")
    return {
        "tiny": save_tiny(root / "tiny", minilm_dir),
        "splade": save_tiny_splade(root / "splade", minilm_dir),
        "root": root,
    }


def _loads_nothing(monkeypatch):
    """Make any model load fail loudly: a refusal must come first."""
    from bertfamily.pipelines.embedding import embed, sparse

    def boom(*args, **kwargs):
        raise AssertionError("a model was loaded before the refusal")

    monkeypatch.setattr(embed.SentenceEmbedder, "__init__", boom)
    monkeypatch.setattr(sparse.SparseEncoder, "__init__", boom)


@pytest.mark.parametrize(
    "args, words",
    [
        (["embed", "hi", "--runtime", "onnx"], "--runtime must be torch or openvino"),
        (["embed", "hi", "--runtime", "openvino", "--quantize", "int4"], "int8 or none"),
        (["search", "q", "--corpus", "{root}/docs.txt", "--runtime", "tvm"], "must be torch"),
        (
            ["index", "build", "--corpus", "{root}/docs.txt", "-o", "{root}/i", "--runtime", "x"],
            "must be torch",
        ),
        (
            [
                "index",
                "build",
                "--corpus",
                "{root}/docs.txt",
                "-o",
                "{root}/s",
                "--kind",
                "sparse",
                "--model",
                "{splade}",
                "--runtime",
                "openvino",
            ],
            "SPLADE model runs in torch",
        ),
        (
            [
                "embed",
                "--input",
                "{root}/docs.txt",
                "--output",
                "{root}/out.parquet",
                "--model",
                "{splade}",
                "--runtime",
                "openvino",
            ],
            "--runtime are for dense embedding models",
        ),
        (
            [
                "embed",
                "--input",
                "{root}/docs.txt",
                "--output",
                "{root}/shards",
                "--engine",
                "ray",
                "--runtime",
                "openvino",
            ],
            "--engine ray runs the torch runtime",
        ),
    ],
)
def test_refused_before_loading(cli, dirs, monkeypatch, args, words):
    if "{splade}" not in " ".join(args):
        _loads_nothing(monkeypatch)
    filled = [a.format(root=dirs["root"], splade=dirs["splade"]) for a in args]
    result = cli(*filled)
    assert result.exit_code == 2, result.output
    assert words in result.stderr
    assert "Traceback" not in result.output


def test_serving_a_classifier_with_the_openvino_runtime_is_refused(tmp_path, minilm_dir):
    import bertfamily as bf
    from bertfamily.errors import InputError
    from bertfamily.serve.app import load_served_model
    from helpers import save_tiny_files

    config = bf.EncoderConfig.from_preset(
        "tiny-bert", vocab_size=30522, label_names=("neg", "pos", "mixed")
    )
    save_tiny_files(bf.build_model(config, ["classify"]), tmp_path, minilm_dir)
    with pytest.raises(InputError, match="--runtime openvino is for embedding models"):
        load_served_model(tmp_path, runtime="openvino")


def test_serve_refuses_an_unknown_runtime(cli, dirs):
    result = cli("serve", "--model", str(dirs["tiny"]), "--runtime", "onnx")
    assert result.exit_code == 2, result.output
    assert "--runtime must be torch or openvino" in result.stderr
