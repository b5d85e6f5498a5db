import itertools
import math

import torch

from biomjepa.nn import Encoder, ModelConfig
from biomjepa.train.ema import ema_update, make_teacher
from biomjepa.train.schedules import lr_at, momentum_at


def test_momentum_endpoints_and_monotone():
    for kind in ("cosine", "linear"):
        m = [momentum_at(s, start=0.996, end=0.9997, total_steps=100, kind=kind) for s in range(101)]
        assert math.isclose(m[0], 0.996) and math.isclose(m[-1], 0.9997)
        assert all(b >= a for a, b in itertools.pairwise(m))
    assert momentum_at(500, start=0.996, end=0.9997, total_steps=100) == momentum_at(100, start=0.996, end=0.9997, total_steps=100)


def test_lr_warmup_cosine():
    f = lambda s: lr_at(s, lr=1e-3, min_lr=1e-5, warmup_steps=10, total_steps=110)  # noqa: E731
    assert math.isclose(f(0), 1e-4) and math.isclose(f(9), 1e-3) and math.isclose(f(10), 1e-3)
    assert math.isclose(f(110), 1e-5) and f(60) < f(30)


def test_teacher_no_grad_and_ema():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    student = Encoder(ModelConfig.preset("tiny", vocab_size=50))
    teacher = make_teacher(student)
    assert all(not p.requires_grad for p in teacher.parameters())
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)
    before = [p.clone() for p in teacher.parameters()]
    ema_update(teacher, student, 0.9)
    for b, t, s in zip(before, teacher.parameters(), student.parameters()):
        torch.testing.assert_close(t, 0.9 * b + 0.1 * s)
    ids = torch.randint(0, 50, (2, 5))
    out = teacher(ids, torch.rand(2, 5), torch.ones(2, 5, dtype=torch.bool))
    assert not out.requires_grad



def test_running_centre_is_bias_corrected_from_the_first_step():
    """A zero-start EMA holds 0.1 of the first mean after one step at rate 0.9; the corrected centre
    holds all of it, and after many steps both agree."""
    from biomjepa.train.running import RunningTargets

    r = RunningTargets(3, None, rate=0.9, device="cpu")
    r.update({"centre": (torch.full((3,), 4.0), torch.tensor(2.0))})  # mean 2
    torch.testing.assert_close(r.centre, torch.full((3,), 0.2))
    torch.testing.assert_close(r.centre_now(), torch.full((3,), 2.0))
    for _ in range(200):
        r.update({"centre": (torch.full((3,), 6.0), torch.tensor(2.0))})  # mean 3
    torch.testing.assert_close(r.centre_now(), torch.full((3,), 3.0))


def test_running_statistics_resume_and_old_states():
    """State round trip; a state saved before the weights existed counts as warmed up (same centre)."""
    from biomjepa.train.running import RunningTargets

    r = RunningTargets(2, 4, rate=0.5, device="cpu", std=True, depth=True)
    r.update({"centre": (torch.ones(4, 2), torch.tensor([1.0, 0, 2, 0])),
              "moments": (torch.tensor([[2.0, 4.0], [8.0, 20.0]]), torch.tensor(2.0)),
              "depth": (torch.eye(3, 5) * 2, torch.tensor(2.0))})
    q = RunningTargets(2, 4, rate=0.5, device="cpu", std=True, depth=True)
    q.load_state_dict(r.state_dict())
    torch.testing.assert_close(q.centre_now(), r.centre_now())
    torch.testing.assert_close(q.scale_now(), r.scale_now())
    torch.testing.assert_close(r.scale_now(), torch.tensor([3.0, 6.0]).sqrt())  # E[t²] − E[t]² = 4 − 1, 10 − 4
    old = RunningTargets(2, None, rate=0.9, device="cpu")
    old.load_state_dict({"centre": torch.tensor([0.5, -1.0])})
    torch.testing.assert_close(old.centre_now(), torch.tensor([0.5, -1.0]))


def test_depth_residual_leaves_no_linear_depth_in_the_cell_level():
    """teacher.depth_residual: the level's least-squares fit on log detected genes and log library size is
    removed exactly (centred coordinates; an uncentred ridge once left a third of the depth in)."""
    from types import SimpleNamespace

    from biomjepa.train.running import RunningTargets, depth_covariates
    from biomjepa.train.targets import _depth_residual

    g = torch.Generator().manual_seed(0)
    n, U, D = 200, 4, 3
    genes = torch.randint(200, 3000, (n,), generator=g)
    lib = genes * torch.exp(torch.randn(n, generator=g) * 0.3 + 1)
    X = depth_covariates(genes, lib)
    level = X[:, 1:2] * torch.tensor([[1.0, -2.0, 0.5]]) + 0.1 * torch.randn(n, D, generator=g)
    t = (level[:, None, :] + 0.05 * torch.randn(n, U, D, generator=g)).reshape(n * U, D)
    inp = SimpleNamespace(valid=torch.ones(n, U, dtype=torch.bool), depth=X)
    r = RunningTargets(D, None, rate=0.0, device="cpu", depth=True)
    first, stats = _depth_residual(t, inp, U, r)  # no running fit yet: the micro-batch's own
    r.update({"depth": stats})
    second, _ = _depth_residual(t, inp, U, r)
    for out in (first, second):
        L = out.reshape(n, U, D).mean(1)
        for k in (1, 2):
            for d in range(D):
                assert abs(float(torch.corrcoef(torch.stack([X[:, k], L[:, d]]))[0, 1])) < 1e-3
    assert float((level - level.mean(0)).std()) > 0.5 and torch.allclose(first.mean(0), t.mean(0), atol=1e-4)
