"""Calibration measures every case in interleaved rounds spread over the whole run, each term from the
median over rounds: a slow spell of the machine is one turn of each case, never all of one term's
samples (pinned here with fake clocks, no torch)."""

from __future__ import annotations

from narrowpipe.calibration.measurement import Case, Measurement
from narrowpipe.calibration.rounds import Clocks, measure_in_rounds, round_order


class FakeMachine:
    """Wall and thread clocks that only move when a case's call runs: each call takes
    ``cost(name, round)`` seconds of CPU time, plus ``stolen`` seconds of wall time (another
    process ran) during calls of round ``stolen_round``. ``log`` is (wall time, name) of every call."""

    def __init__(self, cost, stolen: float = 0.0, stolen_round: int = -1, faults=None) -> None:
        self.cost, self.stolen, self.stolen_round = cost, stolen, stolen_round
        self.wall = self.cpu = 0.0
        self.round = -1          # -1: the warm-up calls before the first round
        self.log: list[tuple[float, str]] = []
        self.fault_count = 0
        self.faults = faults or (lambda name, r: False)

    def clocks(self) -> Clocks:
        return Clocks(wall=lambda: self.wall, thread=lambda: self.cpu, faults=lambda: self.fault_count)

    def case(self, name: str, **kw) -> Case:
        def call() -> None:
            self.log.append((self.wall, name))
            dt = self.cost(name, self.round)
            self.cpu += dt
            self.wall += dt + (self.stolen if self.round == self.stolen_round else 0.0)
            if self.faults(name, self.round):
                self.fault_count += 1
        return Case(name, "fp32", (1,), 0, 0, call, **kw)


def _progress(machine: FakeMachine):
    """Advance the machine's round counter when the runner reports a finished round."""
    def report(_: str) -> None:
        machine.round += 1
    return report


def _run(machine: FakeMachine, cases: list[Case], rounds: int, **kw) -> list[Measurement]:
    machine.round = 0
    # the warm-up calls run before round 0 too; count them as round 0 (same costs)
    return measure_in_rounds(cases, rounds, clocks=machine.clocks(), thread_clock=True,
                             progress=_progress(machine), **kw)


def test_every_case_takes_one_turn_per_round_in_a_reshuffled_order():
    cases = [Case(str(i), "fp32", (i,), 0, 0, lambda: None) for i in range(12)]
    orders = [round_order(cases, r) for r in range(5)]
    assert all(sorted(o) == list(range(12)) for o in orders)
    assert len({tuple(o) for o in orders}) == 5                     # a new order each round
    followers = {o[o.index(3) + 1] for o in orders if o.index(3) < 11}
    assert len(followers) > 1                                       # case 3 does not always precede one case
    assert round_order(cases, 2) == orders[2]                       # reproducible


def test_a_sweeps_cases_run_together_in_each_round():
    cases = [Case(kind, "fp32", (i,), 0, 0, lambda: None) for kind in ("add", "conv", "vector_op:softmax",
                                                                         "vector_op:pool") for i in range(4)]
    for r in range(6):
        kinds = [cases[i].group for i in round_order(cases, r)]
        runs = [k for j, k in enumerate(kinds) if j == 0 or kinds[j - 1] != k]
        assert sorted(runs) == ["add", "conv", "vector_op"]            # one stretch per sweep


def test_a_case_with_several_turns_has_them_spread_over_its_sweep():
    cases = [Case("depthwise", "fp32", (i,), 0, 0, lambda: None, turns=3 if i == 0 else 1) for i in range(12)]
    for r in range(4):
        order = round_order(cases, r)
        assert len(order) == 14
        at = [p for p, i in enumerate(order) if i == 0]
        assert len(at) == 3
        gaps = [b - a for a, b in zip(at, at[1:])] + [at[0] + len(order) - at[-1]]
        assert min(gaps) >= 4                                       # about a third of the round apart


def test_each_term_is_the_median_over_rounds_of_each_turns_median():
    # case "a" takes 1 s in round 0, 2 s in round 1 ..., 5 s in round 4 (whole seconds: exact sums)
    m = FakeMachine(lambda name, r: float(max(r, 0) + 1) if name == "a" else 2.0)
    out = _run(m, [m.case("a", min_seconds=0.0), m.case("b", min_seconds=0.0)], rounds=5, warmup=1)
    a, b = out
    assert a.rounds == (1.0, 2.0, 3.0, 4.0, 5.0)
    assert a.seconds == 3.0 and b.seconds == 2.0


def test_a_slow_spell_in_one_round_does_not_move_the_terms():
    """Another process takes the core for 50 s in every call of round 2: the wall clock sees it, the
    thread clock does not, and the median over the rounds does not either."""
    m = FakeMachine(lambda name, r: 1.0, stolen=50.0, stolen_round=2)
    out = _run(m, [m.case(n, min_seconds=0.0) for n in "abc"], rounds=5, warmup=1)
    assert [x.seconds for x in out] == [1.0] * 3


def test_turns_repeat_a_short_call_to_the_minimum_turn_length_and_warm_it_up():
    m = FakeMachine(lambda name, r: 1e-3)
    case = m.case("a", min_seconds=0.004, warmup=1)
    _run(m, [case], rounds=3, warmup=2)
    calls = [n for _, n in m.log]
    assert len(calls) == 2 + 3 * (1 + 4)        # 2 first warm-ups, then per round 1 warm-up + 4 timed calls
    one = m.case("b", min_seconds=0.004, warmup=0, max_calls=1)
    m.log.clear()
    _run(m, [one], rounds=3, warmup=2)
    assert len(m.log) == 2 + 3                   # a one-call case: no warm-up in its turns
    long = m.case("c", min_seconds=0.0005, warmup=1)
    m.log.clear()
    _run(m, [long], rounds=3, warmup=2)
    assert len(m.log) == 2 + 3                   # a call longer than a turn: one call, no warm-up


def test_no_term_is_measured_in_one_burst():
    """With 40 cases of 1 ms over 6 rounds, every case's timed calls span from the first sixth of
    the run to the last sixth (sweep after sweep, each case's calls would sit inside 1/40 of it)."""
    m = FakeMachine(lambda name, r: 1e-3)
    cases = [m.case(str(i), min_seconds=0.0, warmup=0) for i in range(40)]
    _run(m, cases, rounds=6, warmup=1)
    start, end = 40 * 1e-3, m.wall                        # after the warm-up calls
    for i in range(40):
        times = [t for t, n in m.log if n == str(i) and t >= start]
        assert len(times) == 6
        assert times[0] < start + (end - start) / 6 and times[-1] >= start + 5 * (end - start) / 6


def test_turns_with_page_faults_are_left_out_when_enough_are_clean():
    m = FakeMachine(lambda name, r: 9.0 if r in (1, 3) else 1.0, faults=lambda name, r: r in (1, 3))
    skip, keep = m.case("skip", skip_faulted=True, warmup=0, max_calls=1), m.case("keep", warmup=0, max_calls=1)
    out = _run(m, [skip, keep], rounds=5, warmup=1)
    assert out[0].rounds == (1.0, 1.0, 1.0) and out[0].seconds == 1.0
    assert out[1].rounds == (1.0, 9.0, 1.0, 9.0, 1.0) and out[1].seconds == 1.0


def test_the_turn_seconds_are_kept_and_older_files_load():
    m = Measurement("add", "fp32", (4,), 4, 48, 2e-6, (1e-6, 2e-6, 3e-6))
    d = m.to_dict()
    assert d["rounds"] == [1e-6, 2e-6, 3e-6] and Measurement.from_dict(d) == m
    old = {"kind": "add", "dtype": "fp32", "shape": [4], "flops": 4, "bytes": 48, "seconds": 2e-6}
    assert Measurement.from_dict(old).rounds == () and "rounds" not in Measurement.from_dict(old).to_dict()


def test_a_case_with_a_set_up_times_a_new_call_each_turn():
    m = FakeMachine(lambda name, r: 1.0)
    made: list[str] = []

    def setup():
        made.append(f"copy{len(made)}")
        return m.case(made[-1]).fn
    case = m.case("first", min_seconds=0.0, warmup=0)
    case.setup = setup
    _run(m, [case], rounds=4, warmup=1)
    assert made == ["copy0", "copy1", "copy2", "copy3"]             # one per turn
    assert [n for _, n in m.log] == ["first", *made]               # the warm-up call used fn, each turn its copy


def test_a_long_case_takes_fewer_turns_spread_over_the_run():
    """A call of half a second (a wide GEMM grid point) takes LONG_CALL_TURNS turns of the 15
    rounds, every third round, while a short case takes all 15; both still span the run."""
    from narrowpipe.calibration.rounds import LONG_CALL_SECONDS, LONG_CALL_TURNS, turn_stride
    machine = FakeMachine(lambda name, r: 0.5 if name == "long" else 0.001 * (1 + r))
    cases = [machine.case("long"), machine.case("short")]
    out = _run(machine, cases, 15)
    assert len(out[0].rounds) == LONG_CALL_TURNS == 5
    assert len(out[1].rounds) == 15
    long_calls = [t for t, name in machine.log if name == "long"]
    assert len(long_calls) == 1 + 5                                      # one warm-up call is enough
    long_calls = long_calls[1:]
    spans = machine.wall
    assert long_calls[-1] - long_calls[0] > 0.5 * spans                  # spread over the run, not bunched
    assert turn_stride(15, LONG_CALL_SECONDS / 2) == 1
    assert turn_stride(3, 10.0) == 1                                     # a quick run keeps every turn


def test_a_cpu_convolution_case_runs_right_after_an_elementwise_op_wrote_its_input():
    """calibrate's CPU convolution turns: a ReLU writes the input buffer, then the next cold copy of
    the module runs on that buffer, and only that call is timed (the case times itself)."""
    import torch

    from narrowpipe.calibration.sweeps import after_elementwise, conv_cases
    x = torch.tensor([[-1.0, 2.0], [3.0, -4.0]])
    seen = []

    class Module:
        def __call__(self, inp):
            seen.append(inp.clone())
            return inp

    call = after_elementwise(lambda: Module(), x)
    assert isinstance(call(), float)
    assert torch.equal(seen[0], torch.tensor([[0.0, 2.0], [3.0, 0.0]]))
    assert all(c.self_timed and c.warmup == 0 for c in conv_cases("cpu"))
