"""The small torch MLP regressor shared by the reconstruction and perturbation probes (torch imported lazily)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np


def fit_mlp(
    X: np.ndarray,
    Y: np.ndarray,
    train: np.ndarray,
    val: np.ndarray,
    *,
    seed: int,
    hidden: Sequence[int] = (512, 1024, 512),
    max_epochs: int = 50,
    patience: int = 5,
    lr: float = 1e-3,
    batch_size: int = 128,
    zero_init_cols: np.ndarray | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """Fit ``Linear-GELU`` blocks of widths ``hidden`` + a linear head with Adam on MSE; early-stop on ``val``.

    Deterministic given ``seed`` (initialisation and batch order use a forked torch RNG, so the global
    torch RNG is untouched); the number of torch threads is whatever the caller set. The weights of the
    epoch with the lowest validation MSE are kept; training stops after ``patience`` epochs without
    improvement or at ``max_epochs``.

    Parameters
    ----------
    X
        ``[N, d_in]`` inputs (already standardized by the caller).
    Y
        ``[N, d_out]`` targets.
    train
        Training row indices.
    val
        Validation row indices (early stopping).
    seed
        Seed of initialisation and batch order.
    hidden
        Hidden-layer widths.
    max_epochs
        Epoch limit.
    patience
        Early-stopping patience in epochs.
    lr
        Adam learning rate.
    batch_size
        Mini-batch size.
    zero_init_cols
        Input columns whose first-layer weights start at zero (they then stay zero unless the column is
        ever non-zero in training, so unseen one-hot features contribute nothing).

    Returns
    -------
    ``predict(X_new) -> Y_hat`` as float64 arrays.
    """
    import torch
    from torch import nn

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dims = [X.shape[1], *hidden]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(dims):
            layers += [nn.Linear(a, b), nn.GELU()]
        model = nn.Sequential(*layers, nn.Linear(dims[-1], Y.shape[1]))
        if zero_init_cols is not None and len(zero_init_cols):
            with torch.no_grad():
                model[0].weight[:, torch.as_tensor(zero_init_cols)] = 0.0
        gen = torch.Generator().manual_seed(seed)
    Xt, Yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(Y, dtype=torch.float32)
    tr, va = torch.as_tensor(train), torch.as_tensor(val)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    best, best_state, bad = float("inf"), None, 0
    for _ in range(max_epochs):
        model.train()
        for b in tr[torch.randperm(len(tr), generator=gen)].split(batch_size):
            opt.zero_grad()
            nn.functional.mse_loss(model(Xt[b]), Yt[b]).backward()
            opt.step()
        model.eval()
        with torch.inference_mode():
            loss = nn.functional.mse_loss(model(Xt[va]), Yt[va]).item()
        if loss < best - 1e-7:
            best, bad = loss, 0
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            bad += 1
            if bad >= patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()

    def predict(Xn: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return model(torch.as_tensor(Xn, dtype=torch.float32)).double().numpy()

    return predict
