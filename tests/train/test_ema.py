import itertools
import math

import torch

from biomjepa.nn import Encoder, ModelConfig
from biomjepa.train.ema import ema_update, make_teacher, update_centre
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
    c = torch.zeros(3)
    update_centre(c, torch.ones(3), 0.9)
    torch.testing.assert_close(c, torch.full((3,), 0.1))
