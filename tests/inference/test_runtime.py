"""Thread counts from the free cores (bertfamily.runtime) and `--threads` on the commands that
compute."""

from __future__ import annotations

import os

import pytest
import torch

from bertfamily import runtime
from bertfamily.errors import InputError


def _fake_stat(monkeypatch, before, after, cores=2, cpus=(0, 1)):
    """/proc/stat read twice: ``before`` then ``after`` (cpu → (idle, total) jiffies)."""
    reads = iter([before, after])
    monkeypatch.setattr(runtime, "_cpu_times", lambda: next(reads))
    monkeypatch.setattr(runtime, "physical_cores", lambda: cores)
    monkeypatch.setattr(runtime.os, "sched_getaffinity", lambda pid: set(cpus))
    monkeypatch.setattr(runtime.time, "sleep", lambda s: None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def test_one_core_taken_leaves_one_thread(monkeypatch):
    # cpu0 idle for all 10 jiffies, cpu1 busy for all 10 (another process spinning)
    _fake_stat(monkeypatch, {0: (100, 200), 1: (50, 200)}, {0: (110, 210), 1: (50, 210)})
    assert runtime.free_cores() == pytest.approx(1.0)
    _fake_stat(monkeypatch, {0: (100, 200), 1: (50, 200)}, {0: (110, 210), 1: (50, 210)})
    assert runtime.choose_threads(0) == (1, "1.0 of 2 physical cores free")


def test_idle_machine_uses_every_core_and_busy_cpus_outside_the_set_do_not_count(monkeypatch):
    # cpu 2 (not in this process's set) is busy; cpus 0 and 1 are idle
    before = {0: (0, 0), 1: (0, 0), 2: (0, 0)}
    after = {0: (10, 10), 1: (10, 10), 2: (0, 10)}
    _fake_stat(monkeypatch, before, after)
    assert runtime.choose_threads(0)[0] == 2
    # a busy machine still gets one thread, and processes share the free cores
    _fake_stat(monkeypatch, {0: (0, 0), 1: (0, 0)}, {0: (1, 10), 1: (0, 10)})
    assert runtime.choose_threads(0)[0] == 1
    _fake_stat(monkeypatch, before, after, cores=8, cpus=range(8))
    after8 = {c: (10, 10) for c in range(8)}
    reads = iter([{c: (0, 0) for c in range(8)}, after8])
    monkeypatch.setattr(runtime, "_cpu_times", lambda: next(reads))
    why = "8.0 of 8 physical cores free / 3 processes"
    assert runtime.choose_threads(0, processes=3) == (2, why)


def test_request_and_environment_win(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert runtime.choose_threads(0) == (3, "OMP_NUM_THREADS=3")
    assert runtime.choose_threads(5) == (5, "--threads")
    with pytest.raises(InputError, match="threads must be >= 0"):
        runtime.choose_threads(-1)


def test_cgroup_quota(tmp_path):
    f = tmp_path / "cpu.max"
    f.write_text("150000 100000\n")
    assert runtime.cgroup_cpu_quota(f) == 1.5
    f.write_text("max 100000\n")
    assert runtime.cgroup_cpu_quota(f) is None
    assert runtime.cgroup_cpu_quota(tmp_path / "missing") is None
    f.write_text("garbage")
    assert runtime.cgroup_cpu_quota(f) is None


def test_real_proc_stat_reads():
    free = runtime.free_cores(0.02)
    assert 0.0 <= free <= runtime.physical_cores() + 1e-9


@pytest.mark.parametrize(
    "command",
    [
        ["embed", "--model", "{m}", "a b c"],
        ["search", "--model", "{m}", "--corpus", "{c}", "a"],
    ],
)
def test_commands_take_threads(cli, minilm_dir, tmp_path, command, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text("one line\nanother line\n")
    args = [a.format(m=minilm_dir, c=corpus) for a in command]
    before = torch.get_num_threads()
    calls: list[int] = []
    real = torch.set_num_threads

    def record(n: int) -> None:
        calls.append(n)
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", record)
    result = cli(*args[:1], "--threads", "1", *args[1:])
    assert result.exit_code == 0, result.output
    assert calls[0] == 1  # the command ran on the thread asked for
    assert torch.get_num_threads() == before  # and the `cli` fixture gave the count back


def test_every_computing_command_has_threads():
    from typer.main import get_command

    from bertfamily.cli import app

    group = get_command(app)
    computing = ["embed", "search", "index", "serve", "predict", "rerank", "evaluate",
                 "mine-negatives", "fill-mask", "finetune", "pretrain", "distill"]  # fmt: skip
    for name in computing:
        cmd = group.commands[name]
        subs = getattr(cmd, "commands", None)
        for c in subs.values() if subs else [cmd]:
            if c.name == "init":  # `distill init` only copies layers into a student
                continue
            assert "threads" in {p.name for p in c.params}, f"{name} {c.name} lacks --threads"


def _policy_after(code: str, env: dict[str, str]) -> str:
    """OMP_WAIT_POLICY and GOMP_SPINCOUNT after ``code`` runs in a fresh Python with ``env``
    (neither set otherwise)."""
    import os
    import subprocess
    import sys

    keep = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    show = "; import os; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"
    out = subprocess.run(
        [sys.executable, "-c", code + show],
        env={**keep, **env}, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


def test_import_bounds_the_openmp_spin_unless_the_user_chose():
    assert _policy_after("import bertfamily", {}) == "None 30000"
    assert _policy_after("import bertfamily", {"OMP_WAIT_POLICY": "PASSIVE"}) == "PASSIVE None"
    assert _policy_after("import bertfamily", {"GOMP_SPINCOUNT": "5"}) == "None 5"
    # torch already loaded: libgomp has read its environment, so nothing is pretended
    assert _policy_after("import torch, bertfamily", {}) == "None None"


def test_device_option(cli, minilm_dir, monkeypatch):
    """--device on the inference commands: cpu runs; cuda where torch sees none is one clear
    line (exit 2), and int8 off the CPU is refused."""
    from bertfamily.cli.common import torch_device

    assert torch_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert torch_device("auto") == "cpu"
    with pytest.raises(InputError, match="torch sees no CUDA device"):
        torch_device("cuda:0")
    with pytest.raises(InputError, match="auto, cpu, cuda or cuda:N"):
        torch_device("tpu")
    result = cli("embed", "--model", minilm_dir, "--device", "cpu", "--format", "jsonl", "a b")
    assert result.exit_code == 0 and '"line": 1' in result.output
    result = cli("embed", "--model", minilm_dir, "--device", "cuda", "a b")
    assert result.exit_code == 2 and "torch sees no CUDA device" in result.output
    for command in (["search", "--corpus", minilm_dir / "vocab.txt", "q"], ["serve"],
                    ["rerank", "q", "d"], ["fill-mask", "a [MASK]"]):  # fmt: skip
        result = cli(command[0], "--model", minilm_dir, "--device", "cuda", *command[1:])
        assert result.exit_code == 2 and "torch sees no CUDA device" in result.output, command


class _Clock:
    """The governor's three readings, driven by the test: wall seconds, this process's CPU
    seconds, and the busy CPU seconds of its CPUs (every process)."""

    def __init__(self, monkeypatch, cpus=(0, 1), cores=2):
        self.wall = self.own = self.busy = 0.0
        monkeypatch.setattr(runtime.time, "perf_counter", lambda: self.wall)
        monkeypatch.setattr(runtime.time, "process_time", lambda: self.own)
        monkeypatch.setattr(runtime, "_busy_cpu_seconds", lambda cpus: self.busy)
        monkeypatch.setattr(runtime.os, "sched_getaffinity", lambda pid: set(cpus))
        monkeypatch.setattr(runtime, "physical_cores", lambda: cores)

    def run(self, seconds: float, ours: float, others: float) -> None:
        """``seconds`` pass with this process on ``ours`` CPUs, other processes on ``others``."""
        self.wall += seconds
        self.own += ours * seconds
        self.busy += (ours + others) * seconds


@pytest.fixture
def threads_back():
    before = torch.get_num_threads()
    yield
    while runtime.active_governor() is not None:
        runtime.active_governor().stop()
    torch.set_num_threads(before)


def test_governor_follows_other_processes_not_its_own_work(monkeypatch, threads_back):
    clock = _Clock(monkeypatch)
    with runtime.AdaptiveThreads(2) as gov:
        assert torch.get_num_threads() == 2
        clock.run(1.0, ours=2.0, others=0.0)  # our own two busy threads are not "others"
        runtime.adapt_threads()
        assert (gov.threads, torch.get_num_threads(), gov.free) == (2, 2, pytest.approx(2.0))
        clock.run(1.0, ours=1.3, others=0.7)  # a neighbour spins: free 1.3 < 2 - 0.5
        runtime.adapt_threads()
        assert (gov.threads, torch.get_num_threads()) == (1, 1)
        assert gov.free == pytest.approx(1.3)
        clock.run(0.3, ours=1.0, others=0.0)  # within interval_s (0.5 s): no decision
        runtime.adapt_threads()
        assert gov.threads == 1
        clock.run(0.3, ours=1.0, others=1.0)  # the 0.6 s since the last look: 0.5 of others
        runtime.adapt_threads()  # free 1.5 < 1 + 0.6: stays (no flapping at the border)
        assert (gov.threads, gov.free) == (1, pytest.approx(1.5))
        clock.run(1.0, ours=1.0, others=0.0)  # the neighbour ended
        runtime.adapt_threads()
        assert (gov.threads, torch.get_num_threads(), gov.changes) == (2, 2, 2)
        clock.run(1.0, ours=2.0, others=0.4)  # light background: free 1.6 >= 2 - 0.5, kept
        runtime.adapt_threads()
        assert gov.threads == 2
    assert runtime.active_governor() is None


def test_governor_counts_physical_cores_and_its_cap(monkeypatch, threads_back):
    # 4 logical CPUs on 2 cores (hyper-threads); one logical CPU's worth used by others
    clock = _Clock(monkeypatch, cpus=(0, 1, 2, 3), cores=2)
    gov = runtime.AdaptiveThreads(threads=1).start()
    assert gov.max_threads == 2
    clock.run(1.0, ours=1.0, others=0.0)
    assert gov.update() == 2  # 2 free cores, at most max_threads
    clock.run(1.0, ours=2.0, others=2.0)  # others on 2 logical CPUs = 1 core
    assert (gov.update(), gov.free) == (1, pytest.approx(1.0))


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(max_threads=0), "between 1 and"),
        (dict(max_threads=-3), "between 1 and"),
        (dict(max_threads=10**6), "between 1 and"),  # libgomp crashed the process on this
        (dict(max_threads=2**40), "between 1 and"),
        (dict(max_threads=2.5), "whole number"),
        (dict(max_threads=True), "whole number"),
        (dict(max_threads=float("nan")), "whole number"),
        (dict(max_threads="2"), "whole number"),
        (dict(threads=0), "between 1 and"),
        (dict(threads=1.5), "whole number"),
        (dict(interval_s=0), "interval_s must be > 0"),
        (dict(interval_s=float("nan")), "interval_s must be > 0"),
        (dict(interval_s="0.5"), "number of seconds"),
        (dict(interval_s=None), "number of seconds"),
    ],
)
def test_governor_refuses_bad_counts_before_touching_torch(kwargs, words, threads_back):
    before = torch.get_num_threads()
    with pytest.raises(InputError, match=words):
        runtime.AdaptiveThreads(**kwargs)
    assert runtime.active_governor() is None and torch.get_num_threads() == before
    with pytest.raises(InputError, match="threads must be at most"):
        runtime.choose_threads(10**6)


def test_governors_stopped_in_any_order_give_back_the_first_count(monkeypatch, threads_back):
    _Clock(monkeypatch)
    torch.set_num_threads(2)
    a, b = runtime.AdaptiveThreads(1), runtime.AdaptiveThreads(2)
    a.start()
    b.start()
    assert torch.get_num_threads() == 2
    a.stop()  # b still in charge
    assert runtime.active_governor() is b and torch.get_num_threads() == 2
    b.stop()
    assert runtime.active_governor() is None and torch.get_num_threads() == 2
    a.stop()  # twice: nothing
    runtime.AdaptiveThreads(2).stop()  # never started: nothing
    assert torch.get_num_threads() == 2


def test_a_start_that_fails_leaves_no_governor(monkeypatch, threads_back):
    gov = runtime.AdaptiveThreads(2)

    def refuse(n):
        raise RuntimeError("set_num_threads refused")

    monkeypatch.setattr(torch, "set_num_threads", refuse)
    with pytest.raises(RuntimeError, match="refused"):
        gov.start()
    monkeypatch.undo()
    assert runtime.active_governor() is None


def test_governor_sets_the_computing_threads_own_pool(monkeypatch, threads_back):
    """torch's intra-op count is per thread once a thread has computed: a worker (a server's
    batcher) that ran with 2 threads gets the governor's 1 at its next batch."""
    import threading

    clock = _Clock(monkeypatch)
    torch.set_num_threads(2)
    seen: list[int] = []
    go = threading.Event()

    def worker():
        torch.ones(64, 64) @ torch.ones(64, 64)
        go.wait()
        runtime.adapt_threads()
        seen.append(torch.get_num_threads())

    t = threading.Thread(target=worker)
    t.start()
    gov = runtime.AdaptiveThreads(2).start()
    clock.run(1.0, ours=1.0, others=1.0)
    gov.update()  # decided on the main thread
    go.set()
    t.join()
    assert seen == [1]


def test_automatic_threads_start_a_governor_that_ends_with_the_command(
    cli, minilm_dir, monkeypatch, threads_back
):
    from bertfamily.data import batching as batches

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(runtime, "free_cores", lambda sample_s=0.1: 2.0)
    line = runtime.apply_threads(0)
    assert line.endswith("adapting while it runs)") and runtime.active_governor() is not None
    runtime.active_governor().stop()
    assert "adapting" not in runtime.apply_threads(1) and runtime.active_governor() is None
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert "adapting" not in runtime.apply_threads(0) and runtime.active_governor() is None

    # a command with automatic threads: every engine batch consults the governor (the one
    # place it looks: data.batching.run_batches), which is gone when the command returns
    monkeypatch.delenv("OMP_NUM_THREADS")
    calls: list[int] = []
    real = batches.adapt_threads

    def counted():
        calls.append(1 if runtime.active_governor() is not None else 0)
        real()

    monkeypatch.setattr(batches, "adapt_threads", counted)
    result = cli("embed", "--model", minilm_dir, "a b c", "d e")
    assert result.exit_code == 0, result.output
    assert calls and all(calls)
    assert runtime.active_governor() is None


def test_governor_reset_starts_a_new_look(monkeypatch, threads_back):
    clock = _Clock(monkeypatch)
    gov = runtime.AdaptiveThreads(2)
    clock.run(5.0, ours=0.0, others=2.0)  # a neighbour ran before the work started
    gov.reset()
    with gov:
        clock.run(1.0, ours=2.0, others=0.0)
        assert gov.update() == 2 and gov.free == pytest.approx(2.0)
    clock.run(5.0, ours=0.0, others=2.0)
    with gov:  # without a reset the look spans the neighbour's run
        assert gov.update() == 1 and torch.get_num_threads() == 1


def test_training_threads_follow_the_load_only_when_automatic(monkeypatch, threads_back):
    from bertfamily.cli.common import training_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(runtime, "free_cores", lambda sample_s=0.1: 1.0)
    monkeypatch.setattr(runtime, "physical_cores", lambda: 2)
    with training_threads(0) as line:
        gov = runtime.active_governor()
        assert gov is not None and (gov.threads, gov.max_threads) == (1, 2)
        assert "adapting while it runs" in line and torch.get_num_threads() == 1
    assert runtime.active_governor() is None
    with training_threads(2) as line:
        assert runtime.active_governor() is None and "adapting" not in line


# --- OMP_NUM_THREADS: one parser with --threads, never a crash (issue 42, item 5) -------------
@pytest.mark.parametrize(
    "value, expected, words",
    [
        ("3", 3, None),
        (" 3 ", 3, None),
        ("+3", 3, None),
        ("3,1", 3, None),  # OpenMP's nested list: the top level's count
        ("", None, None),
        ("1000000", "max", "asks for more than"),
        ("99999999999999999999", "max", "asks for more than"),
        ("abc", None, "not a thread count"),
        ("0", None, "not a thread count"),
        ("-3", None, "not a thread count"),
        ("2.5", None, "not a thread count"),
    ],
)
def test_environment_count_is_capped_or_ignored_never_raised(
    monkeypatch, caplog, value, expected, words
):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    monkeypatch.setattr(runtime, "_WARNED", set())
    expected = (os.cpu_count() or 1) if expected == "max" else expected  # capped to the CPUs
    with caplog.at_level("WARNING", logger="bertfamily.runtime"):
        assert runtime.env_threads() == expected
        assert runtime.env_threads() == expected  # asked twice: warned once
    warnings = [r.getMessage() for r in caplog.records]
    if words is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and words in warnings[0] and "OMP_NUM_THREADS" in warnings[0]
    assert runtime.threads_are_automatic(0) == (expected is None)


def test_a_capped_environment_count_is_what_choose_threads_gives(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "99999999999999999999")
    limit = os.cpu_count() or 1
    assert runtime.choose_threads(0) == (limit, f"OMP_NUM_THREADS={limit}")
    assert runtime.choose_threads(1) == (1, "--threads")  # the flag still wins


@pytest.mark.parametrize("value", [10**20, -1, 1.5, True, "2"])
def test_the_flag_and_arguments_share_one_check(value):
    with pytest.raises(InputError, match="threads must be"):
        runtime.thread_count(value)
    with pytest.raises(InputError, match="threads must be"):
        runtime.choose_threads(value)


@pytest.mark.parametrize(
    "value, words",
    [
        ("1000000", "asks for more than"),
        ("99999999999999999999", "asks for more than"),
        ("abc", "not a thread count"),
    ],  # fmt: skip
)
def test_commands_run_with_any_environment_count(minilm_dir, value, words):
    """Before: 1000000 segfaulted the process in torch.set_num_threads, 10**20 raised
    "Overflow when unpacking long long". Plain torch runs with either; so do we."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS=value)
    help_run = subprocess.run(
        [sys.executable, "-m", "bertfamily", "embed", "--help"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert help_run.returncode == 0 and "--threads" in help_run.stdout
    run = subprocess.run(
        [sys.executable, "-m", "bertfamily", "embed", "--model", str(minilm_dir),
         "--format", "jsonl", "a b c"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert '"line": 1' in run.stdout
    warnings = [line for line in run.stderr.splitlines() if "bertfamily.runtime" in line]
    assert len(warnings) == 1 and words in warnings[0], run.stderr


# --- every numeric environment variable through one parser with bounds (issue 43, kind 2) ----
@pytest.mark.parametrize(
    "value, expected",
    [("3", 3), (" +3 ", 3), ("1e3", 1000), ("", 7), ("abc", None), ("2.5", None),
     ("1_000", None), ("-1", None), ("1e400", None), ("99999999999999999999", None)],
)  # fmt: skip
def test_env_int_is_the_one_bounded_parser(monkeypatch, value, expected):
    monkeypatch.setenv("BF_TEST_COUNT", value)
    if expected is None:
        with pytest.raises(InputError, match="BF_TEST_COUNT=.* must be a whole number between 0"):
            runtime.env_int("BF_TEST_COUNT", 7, maximum=10**6)
    else:
        assert runtime.env_int("BF_TEST_COUNT", 7, maximum=10**6) == expected


@pytest.mark.parametrize(
    "variable, value",
    [("WORLD_SIZE", "0"), ("WORLD_SIZE", "99999999999999999999"), ("RANK", "x"),
     ("LOCAL_RANK", "-2")],
)  # fmt: skip
def test_process_variables_are_refused_in_one_line(monkeypatch, variable, value):
    from bertfamily.train.distributed import init_distributed

    monkeypatch.setenv(variable, value)
    with pytest.raises(InputError, match=f"environment variable {variable}="):
        init_distributed("cpu")


def test_the_parameter_budget_variable_shares_the_parser(monkeypatch):
    from bertfamily.config import ConfigError, max_parameters_limit

    monkeypatch.setenv("BERTFAMILY_MAX_PARAMETERS", "1e400")  # was int(float("inf")): OverflowError
    with pytest.raises(ConfigError, match="BERTFAMILY_MAX_PARAMETERS='1e400'"):
        max_parameters_limit()
    monkeypatch.setenv("BERTFAMILY_MAX_PARAMETERS", "2e9")
    assert max_parameters_limit() == 2 * 10**9


@pytest.mark.parametrize(
    "raw, after",
    [("4", "4"), ("4,2", "4,2"), ("1000000", "cpus"), ("99999999999999999999", "cpus"),
     ("abc", None), ("0", None)],
)  # fmt: skip
def test_the_command_line_sanitizes_what_libgomp_and_mkl_read(monkeypatch, raw, after):
    monkeypatch.setattr(runtime, "_WARNED", set())
    for name in runtime.THREAD_VARIABLES:
        monkeypatch.setenv(name, raw)
    runtime.sanitize_thread_environment()
    after = str(os.cpu_count() or 1) if after == "cpus" else after
    for name in runtime.THREAD_VARIABLES:
        assert os.environ.get(name) == after


@pytest.mark.parametrize("value", ["1000000", "99999999999999999999", "abc"])
def test_plain_torch_and_our_command_agree_on_any_mkl_count(value):
    """libgomp and MKL read the variables when torch loads: plain torch runs with these values
    (libgomp prints "Invalid value" for the overflowing one); the command line rewrites them
    before torch loads, so torch sees a sane count and says nothing raw."""
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS=value, MKL_NUM_THREADS=value)
    code = (
        "from bertfamily.cli import app; import sys; sys.argv=['bertfamily','models','--help'];"
        "from bertfamily import runtime; runtime.sanitize_thread_environment();"
        "import torch; print(torch.get_num_threads(), float(torch.ones(3) @ torch.ones(3)))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    threads, dot = run.stdout.split()
    assert 1 <= int(threads) <= (os.cpu_count() or 1) and float(dot) == 3.0
    assert "libgomp" not in run.stderr and "Traceback" not in run.stderr
