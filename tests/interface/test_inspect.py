"""Look inside: parameter table, traced dataflow, differences, comparison table, CLI."""

from __future__ import annotations

import csv
import io
import json

import pytest
import torch
from typer.testing import CliRunner

from bertfamily import EncoderConfig, build_model
from bertfamily.cli import app
from bertfamily.inspect.compare import comparison_rows, diff_traces, format_rows
from bertfamily.inspect.explore import align, default_heads
from bertfamily.inspect.models import meta_model, resolve_config, shrink_layers
from bertfamily.inspect.params import parameter_table
from bertfamily.inspect.symbols import choose_batch_shape, evaluate, shape_symbols, symbol_table
from bertfamily.inspect.trace import example_inputs, trace, trace_model
from bertfamily.presets import FAMILY, PRESETS, PUBLISHED_PARAMETERS

runner = CliRunner()
SMALL_V = 1009  # shrunk vocabulary for traces (distinct from every other size of the presets)


def _heads(config):
    return default_heads(config)


# --- parameter table ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(PRESETS))
def test_params_add_up_to_the_real_count(name):
    config = EncoderConfig.from_preset(name)
    heads = _heads(config)
    table = parameter_table(name, heads=heads)
    real = sum(p.numel() for p in meta_model(config, heads).parameters())  # shared: once
    assert table.total == real
    assert sum(table.subtotals().values()) == real
    # base model + pooler (the published count), less the pooler when no head reads it (GTE
    # and NomicBERT: no pooler in the base model either)
    unread = config.use_pooler and config.base_pooler and not config.reads_pooler(tuple(heads))
    H = config.hidden_size
    assert table.trunk_total == meta_model(config).num_parameters() - unread * (H * H + H)
    assert table.trunk_total == sum(
        table.subtotals()[b]
        for b in table.subtotals()
        if b in {r.block for r in table.rows if r.part == "trunk"}
    )
    if name in PUBLISHED_PARAMETERS:  # the base model, as published (with its pooler)
        assert parameter_table(name).total == PUBLISHED_PARAMETERS[name]
        assert table.trunk_total == PUBLISHED_PARAMETERS[name] - unread * (H * H + H)


def test_deberta_emd_position_table_is_its_own_head_row():
    """The absolute position table exists only for the enhanced mask decoder (MLM head): the
    trunk is the published 138,601,728; the table is a labelled row of the decoder's block."""
    trunk_only = parameter_table("deberta-base")
    assert trunk_only.total == trunk_only.trunk_total == PUBLISHED_PARAMETERS["deberta-base"]
    assert not any(
        "position" in r.name and "relative" not in r.name
        for r in trunk_only.rows
        if r.name.startswith("encoder.embeddings")
    )
    table = parameter_table("deberta-base", heads=["mlm"])
    assert table.trunk_total == PUBLISHED_PARAMETERS["deberta-base"]
    row = next(r for r in table.rows if r.name == "encoder.embeddings.position")
    assert (row.block, row.part, row.params) == ("mlm_decoder", "head", 512 * 768)
    assert "run only by mlm_decoder" in row.note and row.output_shape == "(1, T, H)"
    assert table.subtotals()["embeddings"] == 50265 * 768 + 2 * 768
    result = runner.invoke(app, ["params", "deberta-base", "--head", "mlm"])
    assert result.exit_code == 0 and "393,216" in result.output
    assert f"{PUBLISHED_PARAMETERS['deberta-base']:,}" in result.output


def test_chinese_bert_base_figures_of_spec():
    table = parameter_table("bert-base", heads=["mlm"], vocab_size=21128)
    by_name = {r.name: r.params for r in table.rows}
    expected = {
        "encoder.embeddings.token": 16_226_304,
        "encoder.embeddings.segment": 1_536,
        "encoder.embeddings.position": 393_216,
        "encoder.embeddings.norm": 1_536,
        "encoder.layers.0.attention": 2_362_368,
        "encoder.layers.0.attention_norm": 1_536,
        "encoder.layers.0.ffn": 4_722_432,
        "encoder.layers.0.ffn_norm": 1_536,
        "encoder.layers.11.ffn": 4_722_432,
        "mlm_head.dense": 590_592,
        "mlm_head.norm": 1_536,
        "mlm_head.bias": 21_128,
    }
    for name, count in expected.items():
        assert by_name[name] == count, name
    decoder = next(r for r in table.rows if r.name == "mlm_head.decoder")
    assert decoder.params == 0 and decoder.shared and "embeddings.token" in decoder.note
    assert next(r for r in table.rows if r.name == "mlm_head.bias").output_shape == "(B, T, V)"
    assert table.concrete("(B, T, V)") == "(B, T, 21128)"
    # dataflow order: embeddings, 12 layers, MLM head (BertForMaskedLM has no pooler)
    blocks = list(table.subtotals())
    assert blocks[0] == "embeddings" and blocks[1:13] == [f"layer {i}" for i in range(12)]
    assert blocks[13:] == ["mlm_head"]
    assert table.total == 102_290_312 and table.trunk_total == 101_677_056


def test_shared_layers_counted_once_and_marked():
    config = EncoderConfig.from_preset("bert-base", num_hidden_groups=1)
    table = parameter_table(config, heads=["mlm"])
    shared = [r for r in table.rows if r.shared and r.kind == "EncoderLayer"]
    assert [r.block for r in shared] == [f"layer {i}" for i in range(1, 12)]
    assert all(r.params == 0 and "shared" in r.note for r in shared)
    assert table.subtotals()["layer 0"] == 7_087_872
    assert table.total == sum(p.numel() for p in meta_model(config, ["mlm"]).parameters())
    assert table.total == parameter_table("bert-base", heads=["mlm"]).total - 11 * 7_087_872


def test_conditional_layer_norm_option():
    table = parameter_table("bert-base", condition_size=128)
    norm = next(r for r in table.rows if r.name == "encoder.embeddings.norm")
    assert norm.params == 198_144  # 1,536 + 2 · 128 · 768 (W_γ and W_β: C × H each)
    _, config = resolve_config("bert-base", condition_size=128)
    assert table.total == sum(p.numel() for p in meta_model(config).parameters())


def test_params_bad_input():
    with pytest.raises(ValueError, match="head 'sbx' is not available"):
        parameter_table("bert-tiny", heads=["sbx"])
    with pytest.raises(ValueError, match="neither a preset"):
        parameter_table("bert-huge")


# --- dataflow ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def traces():
    """Shrunk traces (two layer steps, small vocabulary) of every preset, with the model and
    batch they were traced on."""
    out = {}
    for name in PRESETS:
        ids = {"pad_token_id": 0, "sep_token_id": None}
        ids = ids if PRESETS[name].get("pad_token_id", 0) >= SMALL_V else {}
        config = EncoderConfig.from_preset(name, vocab_size=SMALL_V, **ids)
        torch.manual_seed(0)
        model = build_model(shrink_layers(config), heads=_heads(config))
        inputs = example_inputs(config, *choose_batch_shape(config, 5, 16))
        tr = trace_model(model, name=name, full_config=config, inputs=inputs)
        out[name] = (tr, model, inputs)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PRESETS))
def test_every_shown_shape_is_the_real_tensor_shape(name, traces):
    tr, model, inputs = traces[name]
    # Independent hooks: the first output tensor of every module at the first layer step.
    actual: dict[str, tuple] = {}

    def first_tensor(obj, depth=0):
        if isinstance(obj, torch.Tensor) or depth > 2:  # rotary: {"rotary": {name: tables}}
            return obj if isinstance(obj, torch.Tensor) else None
        items = (
            obj.values()
            if isinstance(obj, dict)
            else obj
            if isinstance(obj, tuple)
            else vars(obj).values()
            if hasattr(obj, "__dict__")
            else ()
        )
        return next((t for t in (first_tensor(v, depth + 1) for v in items) if t is not None), None)

    def hook(path):
        def fn(module, args, output):
            first = first_tensor(output)
            if first is not None:
                actual.setdefault(path, tuple(first.shape))

        return fn

    handles = [m.register_forward_hook(hook(p)) for p, m in model.named_modules() if p]
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True, output_attentions=True)
    for h in handles:
        h.remove()
    steps = tr.by_key()
    checked = 0
    for s in tr.steps:
        for text, (_, shape) in zip(s.output_symbols, s.outputs):
            assert evaluate(text, tr.symbols) == shape, (s.key, text, shape)
        if not s.kind.startswith("op:") and s.block != "inputs":
            assert s.output_shape == actual[s.key.replace("*", "0")], s.key
            checked += 1
    assert checked >= 10
    B, T = inputs["input_ids"].shape
    assert steps["inputs.input_ids"].output_symbols == ["(B, T)"]
    assert steps["encoder.embeddings"].output_shape == tuple(out.hidden_states[0].shape)
    assert steps["encoder.layers.*"].output_shape == tuple(out.hidden_states[1].shape)
    attn = steps["encoder.layers.*.attention"]
    assert dict(attn.outputs)["probs"] == tuple(out.attentions[0].shape)
    assert dict(attn.outputs)["scores"] == tuple(out.attention_scores[0].shape)
    if tr.config.attention_kind == "windowed":
        # Band-shaped scores and probabilities, global-key columns and global rows; no (T, T).
        G = int(inputs["global_attention_mask"].sum(1).max())
        assert tr.symbols["G"] == G and tr.symbols["W"] == tr.config.attention_windows[0] // 2
        shown = dict(zip((n for n, _ in attn.outputs), attn.output_symbols))
        assert shown == {
            "hidden": "(B, T, H)",
            "probs": "(B, N, T, 2W+1)",
            "scores": "(B, N, T, 2W+1)",
            "global_key_probs": "(B, N, T, G)",
            "global_probs": "(B, N, G, T)",
        }
        band = steps["encoder.layers.*.attention:matmul(B,N,T,2W+1)#0"]
        assert band.output_symbols == ["(B, N, T, 2W+1)"] and "band" in band.operation
        assert steps["encoder.layers.*.attention:softmax#0"].output_symbols == ["(B, N, T, G+2W+1)"]
        assert steps["encoder.layers.*.attention:matmul(B,N,G,T)#0"].operation.startswith(
            "global rows"
        )
        assert not any(t.endswith("T, T)") for st in tr.steps for t in st.output_symbols)
    else:
        assert steps["encoder.layers.*.attention:softmax#0"].output_shape == tuple(
            out.attentions[0].shape
        )
        assert steps["encoder.layers.*.attention:matmul(B,N,T,T)#0"].output_symbols == [
            "(B, N, T, T)"
        ]
    assert steps["mlm_head"].output_shape == tuple(out.logits.shape) == (B, T, SMALL_V)
    if model.encoder.pooler is not None:
        assert steps["encoder.pooler"].output_shape == tuple(out.pooler_output.shape)
    assert steps["encoder.layers.*"].repeat == tr.config.num_hidden_layers


def test_symbols_round_trip():
    config = EncoderConfig.from_preset("tinybert-4l")
    table = symbol_table(config, 5, 16)
    assert shape_symbols((5, 12, 16, 26), table) == "(B, N, 16, Dh)".replace("16", "T")
    assert shape_symbols((5, 16, 936), table) == "(B, T, 3H)"
    assert evaluate("(B, T, 3H)", table) == (5, 16, 936)
    with pytest.raises(ValueError, match="unknown shape symbol"):
        evaluate("(B, Q)", table)


@pytest.mark.slow
def test_differences_from_bert_base_come_from_the_traces(traces):
    ref = traces["bert-base"][0]
    roberta = diff_traces(ref, traces["roberta-base"][0])
    assert {s.key for s in roberta.missing} >= {
        "inputs.token_type_ids",
        "encoder.embeddings.segment",
    }
    distil = diff_traces(ref, traces["distilbert-base"][0])
    assert "encoder.pooler" in {s.key for s in distil.missing}
    assert any("6" in x for x in distil.steps["encoder.layers.*"].sizes)
    tiny = diff_traces(ref, traces["tinybert-4l"][0])
    scores = tiny.steps["encoder.layers.*.attention:matmul(B,N,T,T)#0"]
    assert scores.marked and "Dh = 26 (bert-base: 64)" in scores.structural
    large = diff_traces(ref, traces["bert-large"][0])
    assert not any(d.marked for d in large.steps.values()) and not large.missing
    assert not any(d.marked for d in diff_traces(ref, ref).steps.values())
    # Sharing (ALBERT's schedule) on a BERT preset: the layer step is marked as shared.
    shared_cfg = EncoderConfig.from_preset("bert-base", vocab_size=SMALL_V, num_hidden_groups=1)
    shared = trace(shared_cfg, heads=["mlm", "pair"], batch=5, seq_len=16)
    layer = diff_traces(ref, shared).steps["encoder.layers.*"]
    assert layer.marked and "weights shared" in " ".join(layer.structural)
    # A structural difference: E < H (factorised embedding) adds a projection step.
    fact = trace(
        EncoderConfig.from_preset("bert-base", vocab_size=SMALL_V, embedding_size=128),
        batch=5,
        seq_len=16,
    )
    fd = diff_traces(ref, fact)
    assert fd.steps["encoder.embeddings.projection"].marked
    assert fact.by_key()["encoder.embeddings.token"].output_symbols == ["(B, T, E)"]
    assert fd.steps["encoder.embeddings.token"].marked
    # The families of issue 6's list, from their own presets.
    albert = diff_traces(ref, traces["albert-base"][0])
    assert albert.steps["encoder.embeddings.projection"].marked  # E→H
    assert traces["albert-base"][0].by_key()["encoder.embeddings.projection"].output_symbols == [
        "(B, T, H)"
    ]
    assert "weights shared" in " ".join(albert.steps["encoder.layers.*"].structural)
    deberta = diff_traces(ref, traces["deberta-base"][0])
    att = "encoder.layers.*.attention"
    c2p, p2c = f"{att}:matmul(B,N,T,2T-1)#0", f"{att}:matmul(B,N,T,2T-1)#1"
    assert deberta.steps[c2p].marked and deberta.steps[p2c].marked  # the two position terms
    assert deberta.steps[f"{att}.pos_key"].marked and deberta.steps[f"{att}.pos_query"].marked
    assert not deberta.steps[f"{att}:matmul(B,N,T,T)#0"].marked  # c2c: BERT's QKᵀ itself
    assert "c2c + c2p + p2c" in deberta.steps[att].structural[0]
    longformer = diff_traces(ref, traces["longformer-base"][0])
    for key in (
        f"{att}:matmul(B,N,T,2W+1)#0",
        f"{att}:matmul(B,N,G,T)#0",
        f"{att}.query_global",
        f"{att}.kv_global",
        f"{att}:softmax#0",
        "inputs.global_attention_mask",
    ):
        assert longformer.steps[key].marked, key
    assert f"{att}:matmul(B,N,T,T)#0" in {s.key for s in longformer.missing}


@pytest.mark.slow
def test_align_keeps_every_step_once(traces):
    rows = align([traces[n][0] for n in ("bert-base", "distilbert-base", "roberta-base")])
    keys = [r.key for r in rows]
    assert len(keys) == len(set(keys))
    assert keys.index("encoder.embeddings.segment") < keys.index("encoder.layers.*")


# --- comparison table --------------------------------------------------------------------------
def test_comparison_table_lists_the_ten():
    rows = comparison_rows()
    assert [r["model"] for r in rows] == FAMILY
    for r in rows:
        assert r["parameters"] == PUBLISHED_PARAMETERS[r["model"]]
    tiny = next(r for r in rows if r["model"] == "tinybert-4l")
    assert tiny["d_k"] == 26 and "Dh = 26" in tiny["special"]
    assert next(r for r in rows if r["model"] == "distilbert-base")["segments"] == "none"
    # issue 30's components: rotary positions, gated feed-forwards, local/global, bias-free
    by_name = {r["model"]: r for r in rows}
    assert by_name["gte-base"]["ffn"] == "768→2×3072→768 (GLU)"
    assert "GeGLU" in by_name["gte-base"]["special"]
    assert "no biases in: FFN input" in by_name["gte-base"]["special"]
    assert "SwiGLU" in by_name["nomic-bert"]["special"]
    assert by_name["nomic-bert"]["positions"] == "rotary (RoPE, θ = 1000), 8192"
    assert "local attention (window 128)" in by_name["modernbert-base"]["special"]
    assert "pre-LN" in by_name["modernbert-base"]["special"]
    assert json.loads(format_rows(rows, "json"))[0]["model"] == "bert-base"
    parsed = list(csv.DictReader(io.StringIO(format_rows(rows, "csv"))))
    assert len(parsed) == len(FAMILY) == 20 and parsed[0]["parameters"] == "109482240"
    md = format_rows(rows, "markdown").splitlines()
    assert len(md) == len(FAMILY) + 2 and "109,482,240" in md[2]
    with pytest.raises(ValueError, match="format"):
        format_rows(rows, "xml")


# --- command line ------------------------------------------------------------------------------
def test_cli_params_dataflow_models():
    result = runner.invoke(app, ["params", "bert-base", "--vocab-size", "21128", "--head", "mlm"])
    assert result.exit_code == 0, result.output
    for figure in ("16,226,304", "393,216", "2,362,368", "4,722,432", "590,592", "21,128"):
        assert figure in result.output
    result = runner.invoke(app, ["params", "bert-tiny", "--json"])
    assert json.loads(result.output)["total"] == PUBLISHED_PARAMETERS["bert-tiny"]
    result = runner.invoke(app, ["dataflow", "tiny-distilbert", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert "encoder.pooler" in data["differences"]["missing"]
    result = runner.invoke(app, ["models", "--format", "csv"])
    assert result.exit_code == 0 and result.output.count("\n") == len(FAMILY) + 1
    result = runner.invoke(app, ["params", "bert-tiny", "--head", "nope"])
    assert result.exit_code == 2 and "not available" in result.output


@pytest.mark.parametrize(
    "name, text",
    [
        ("bert-base", "token + segment + position lookups, summed, LayerNorm, dropout"),
        (
            "distilbert-base",
            "token + position lookups, summed, LayerNorm, dropout (no segments)",
        ),
        (
            "deberta-base",
            "token lookup only, LayerNorm, dropout (no absolute positions or segments); "
            "positions enter each attention layer as relative terms",
        ),
        (
            "deberta-v3-base",
            "token lookup only, LayerNorm, dropout (no absolute positions or segments); "
            "positions enter each attention layer as relative terms",
        ),
    ],
)
def test_embeddings_row_says_what_the_config_does(name, text):
    """The embeddings row of params/dataflow follows the fields: DeBERTa looks up tokens only."""
    from bertfamily.inspect.describe import describe_module

    config = EncoderConfig.from_preset(name)
    embeddings = meta_model(shrink_layers(config)).encoder.embeddings
    assert describe_module(embeddings, config) == (text, "Embeddings")


@pytest.mark.slow  # traces longformer-base and bert-base (tens of seconds)
def test_longformer_positions_note_names_the_conversion():
    """dataflow longformer-base explains the 4,096-position limit and the way past it."""
    from bertfamily.inspect.notes import FIELD_NOTES

    note = FIELD_NOTES["max_position_embeddings"]
    text = note(EncoderConfig.from_preset("longformer-base"))
    assert text.startswith("learned absolute positions for 4,096 tokens: a longer input is refused")
    assert "convert to-longformer" in text and "--max-positions N" in text
    assert note(EncoderConfig.from_preset("roberta-base")) == ""
    result = CliRunner().invoke(app, ["dataflow", "longformer-base", "--json"])
    assert result.exit_code == 0, result.output
    assert text in json.loads(result.output)["differences"]["notes"]
    # issue 46: a long input is compared with bert-base at its own longest, not refused
    result = CliRunner().invoke(app, ["dataflow", "longformer-base", "--seq-len", "1100", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["symbols"]["T"] == 1100
    assert out["differences"]["notes"][0].startswith("bert-base traced at T=512")


# --- objective heads: SBO and the distillation projections --------------------------------------
def test_params_head_sbo_is_the_objectives_own_head():
    """params spanbert-base --head sbo: the rows of the SBO head the pretrain recipe builds
    (Joshi et al. 2020 §3.2), counted exactly; the decoder is tied to the token table."""
    from bertfamily.build import build_span_boundary_head

    config = EncoderConfig.from_preset("spanbert-base")
    H, E, V, P = config.hidden_size, config.embedding_size, config.vocab_size, 32
    table = parameter_table("spanbert-base", heads=["mlm", "sbo"])
    rows = {r.name: r for r in table.rows if r.block == "sbo_head"}
    assert rows["sbo_head.position"].params == P * H == 24_576
    assert rows["sbo_head.dense1"].params == 3 * H * H + H == 1_770_240
    assert rows["sbo_head.dense2"].params == H * E + E == 590_592
    assert rows["sbo_head.bias"].params == V == 28_996
    assert all(r.part == "head" for r in rows.values())
    assert rows["sbo_head.dense1"].output_shape == "(M, H)"
    assert rows["sbo_head.bias"].output_shape == "(M, V)"
    with torch.device("meta"):
        model = build_model(config, heads=["mlm"])
        head = build_span_boundary_head(config, model)  # what recipes.pretrain trains
    assert table.subtotals()["sbo_head"] == sum(p.numel() for p in head.parameters()) == 2_417_476
    # no NSP in SpanBERT: no head reads the pooler, so the trunk is the published count less it
    assert table.trunk_total == PUBLISHED_PARAMETERS["spanbert-base"] - (H * H + H)
    assert table.total == parameter_table("spanbert-base", heads=["mlm"]).total + 2_417_476


def test_dataflow_head_sbo_traces_the_span_prediction():
    tr = trace("spanbert-base", heads=["sbo"], vocab_size=SMALL_V)
    steps = {s.key: s for s in tr.steps}
    B = tr.symbols["B"]
    assert tr.symbols["M"] % B == 0 and tr.symbols["M"] not in (B, tr.symbols["T"])
    head = steps["sbo_head"]
    assert head.input_symbols == ["(B, T, H)", "(M)", "(M)", "(M)", "(M)"]
    assert head.output_symbols == ["(M, V)"] and not head.trunk
    assert head.operation.startswith("SBO: each span token from [x_(s−1); x_(e+1); p_(i−s)]")
    assert steps["sbo_head.dense1"].input_symbols == ["(M, 3H)"]


def test_head_distill_shows_tinybert_projections():
    """params/dataflow tinybert-4l --head distill: W_e and W_h, 312 → 768 (the teacher's H)."""
    from bertfamily.objectives.distillation import TinyBertObjective

    table = parameter_table("tinybert-4l", heads=["distill"])
    rows = {r.name: r for r in table.rows if r.part == "head"}
    assert set(rows) == {"distill_projections.embedding", "distill_projections.hidden"}
    assert all(r.params == 312 * 768 + 768 == 240_384 for r in rows.values())
    assert all(r.output_shape == "(B, T, Ht)" for r in rows.values())
    assert table.trunk_total == PUBLISHED_PARAMETERS["tinybert-4l"]
    other = parameter_table("tinybert-4l", heads=["distill"], teacher_hidden_size=1024)
    assert other.head_total == 2 * (312 * 1024 + 1024)
    # the same modules the objective trains (tiny sizes: student H 32, teacher H 48)
    student = build_model(EncoderConfig.from_preset("tiny-bert"))
    teacher = build_model(EncoderConfig.from_preset("tiny-bert").replace(hidden_size=48))
    objective = TinyBertObjective(student, teacher, projection=True)
    tiny = parameter_table("tiny-bert", heads=["distill"], teacher_hidden_size=48)
    assert tiny.head_total == sum(p.numel() for p in objective.projections.parameters())
    tr = trace("tinybert-4l", heads=["distill"], vocab_size=SMALL_V)
    step = {s.key: s for s in tr.steps}["distill_projections.hidden"]
    assert step.operation == "x·Wᵀ + b, W ∈ ℝ^(Ht×H)" and step.outputs[0][1][-1] == 768
    result = runner.invoke(app, ["params", "tinybert-4l", "--head", "distill", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["head_total"] == 480_768


def test_models_shows_the_stated_rounded_size_beside_the_exact_count():
    """Issue 46: the rounded figures of the source documents, beside the exact counts."""
    result = CliRunner().invoke(app, ["models", "--format", "json"])
    rows = {r["model"]: r for r in json.loads(result.output)}
    stated = {m: rows[m]["stated"] for m in rows if rows[m]["stated"]}
    assert stated == {
        "bert-base": "110M", "bert-large": "340M", "roberta-base": "125M", "albert-base": "12M",
        "distilbert-base": "66M", "spanbert-base": "110M", "deberta-base": "140M",
        "longformer-base": "149M", "tinybert-4l": "14.5M", "bert-tiny": "4.4M",
    }  # fmt: skip
    for name, text in stated.items():  # each rounds the exact count (within 5%)
        exact = rows[name]["parameters"]
        assert abs(float(text[:-1]) * 1e6 - exact) / exact < 0.05, name
    folded = CliRunner().invoke(app, ["models"]).output  # not a terminal: one block a model
    assert "bert-tiny: 4,385,920 parameters (published 4,385,920), stated 4.4M" in folded


def test_a_head_output_is_named_from_the_trace_not_by_matching_numbers():
    """Issue 46: bert-tiny has 2 heads and its NSP head 2 classes; its output was labelled
    (B, N) by the value 2, and the comparison with bert-base called that structural."""
    from bertfamily.inspect.trace import trace

    tiny = trace("bert-tiny", heads=["nsp"], batch=3, seq_len=7)
    steps = {s.key: s for s in tiny.steps}
    assert tiny.symbols["N"] == 2
    assert steps["pair_head"].output_symbols == ["(B, 2)"]
    assert steps["pair_head.classifier"].output_symbols == ["(B, 2)"]
    assert steps["encoder.layers.*.attention:matmul(B,N,T,T)#0"].output_symbols == ["(B, N, T, T)"]
    base = trace("bert-base", heads=["nsp"], batch=3, seq_len=7)
    diff = diff_traces(base, tiny)
    assert all(not d["structural"] for d in diff.to_dict()["steps"].values())
