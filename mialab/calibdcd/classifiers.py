"""Membership classifiers ``q: R^d -> [0, 1]`` of the two feature-based detectors.

- ``gaussian_nb``: DPDLLM's Gaussian naive Bayes (scikit-learn). Scores are
  ``predict_proba`` member probabilities; the DPDLLM reference code computes AUC from hard 0/1
  predictions, which we do not copy.
- ``protonet``: VeilProbe's prototypical network: a small MLP embedding (d -> 64 -> 64 -> 16
  bottleneck) trained episodically (2-way, 5 support + 5 query per class, 50 epochs x 10
  episodes, Adam lr 3e-4, weight decay 1e-5) with the prototypical loss plus VeilProbe's
  information-bottleneck penalty ``1e-3 * sum(log(1 + Var(z)))``. Class prototypes are the mean
  embeddings of all training rows; as in the reference code, training uses squared Euclidean
  distances and scoring ``softmax(-Euclidean distance)`` (squared distances would saturate the
  probabilities at 0/1 and tie the ranking). Inputs are standardised with training-set statistics (our
  addition). ``veilprobe_protonet``: the same after VeilProbe's pruning (``prune_features``): each
  difference feature (:func:`mialab.calibdcd.features.difference_columns`) whose members and
  non-members in the training rows do not differ by Welch's t-test at p < 0.01 is set to 0, in
  training and scoring rows alike (CalibDCD's retraining on corrected features prunes afresh).

Both are seeded and deterministic on CPU. Every classifier has ``fit(X, y) -> self`` and
``score(X) -> member probability``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

import numpy as np

from mialab.calibdcd.checks import require_finite, require_matrix
from mialab.calibdcd.features import difference_columns

PRUNE_P = 0.01


class Classifier(Protocol):
    """A membership classifier: ``fit`` on labelled features, ``score`` = P(member | z)."""

    def fit(self, X: np.ndarray, y: np.ndarray) -> Classifier: ...

    def score(self, X: np.ndarray) -> np.ndarray: ...


def _check_labels(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Finite features and 0/1 labels with both classes present."""
    X = require_matrix("features", X)
    y = np.asarray(y).astype(int)
    if y.shape != (X.shape[0],):
        raise ValueError(f"labels: expected shape ({X.shape[0]},), got {y.shape}")
    if set(np.unique(y).tolist()) != {0, 1}:
        raise ValueError(f"labels must contain both 0 (non-member) and 1 (member), got {sorted(set(y.tolist()))}")
    return X, y


class NaiveBayesClassifier:
    """DPDLLM's classifier: ``sklearn.naive_bayes.GaussianNB``, scored by ``predict_proba``."""

    def __init__(self):
        from sklearn.naive_bayes import GaussianNB

        self.model = GaussianNB()

    def fit(self, X: np.ndarray, y: np.ndarray) -> NaiveBayesClassifier:
        X, y = _check_labels(X, y)
        self.model.fit(X, y)
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        proba = self.model.predict_proba(require_matrix("features", X))
        return require_finite("GaussianNB scores", proba[:, list(self.model.classes_).index(1)])


@dataclass(frozen=True)
class ProtoNetConfig:
    """VeilProbe's prototypical-network hyper-parameters (reference code defaults)."""

    hidden_dim: int = 64
    bottleneck_dim: int = 16
    epochs: int = 50
    episodes_per_epoch: int = 10
    n_shot: int = 5
    n_query: int = 5
    lr: float = 3e-4
    weight_decay: float = 1e-5
    ib_beta: float = 1e-3


def _embedding_net(input_dim: int, cfg: ProtoNetConfig):
    """The MLP embedding ``d -> hidden -> hidden -> bottleneck`` (ReLU between layers)."""
    from torch import nn

    return nn.Sequential(nn.Linear(input_dim, cfg.hidden_dim), nn.ReLU(),
                         nn.Linear(cfg.hidden_dim, cfg.hidden_dim), nn.ReLU(),
                         nn.Linear(cfg.hidden_dim, cfg.bottleneck_dim))


def prototypical_loss(support, query):
    """Prototypical loss of one 2-way episode: ``support`` (2, shot, k), ``query`` (2, n_query, k).

    Prototypes are the class means of the support embeddings; each query row is classified by
    ``softmax(-squared Euclidean distance)`` to the prototypes (Snell et al. 2017).
    """
    import torch
    import torch.nn.functional as F

    prototypes = support.mean(dim=1)
    flat = query.reshape(-1, query.shape[-1])
    logits = -torch.cdist(flat, prototypes).pow(2)
    target = torch.arange(query.shape[0]).repeat_interleave(query.shape[1])
    return F.cross_entropy(logits, target)


def bottleneck_penalty(z, beta: float):
    """VeilProbe's information-bottleneck term ``beta * sum_k log(1 + Var_k(z))``."""
    import torch

    return beta * torch.log1p(z.var(dim=0)).sum()


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Run torch on one CPU thread, then restore the setting: for a network this small, intra-op
    threads only add synchronisation, which stalls badly on a loaded shared machine (20x measured)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def welch_keep(X: np.ndarray, y: np.ndarray, p: float = PRUNE_P) -> np.ndarray:
    """Columns of ``X`` whose members and non-members (``y``: 0/1) differ by Welch's t-test at ``p``;
    a constant column (no p-value) is not kept, as in VeilProbe's code."""
    from scipy.stats import ttest_ind

    X, y = _check_labels(X, y)
    with np.errstate(invalid="ignore", divide="ignore"):
        pvalues = ttest_ind(X[y == 0], X[y == 1], equal_var=False, axis=0).pvalue
    return np.nan_to_num(pvalues, nan=1.0) < p


class PrototypicalClassifier:
    """VeilProbe's prototypical network (see module docstring), seeded and deterministic on CPU;
    ``prune``: which columns VeilProbe's t-test may zero (a mask from the feature width)."""

    def __init__(self, seed: int = 0, config: ProtoNetConfig = ProtoNetConfig(),
                 prune: Callable[[int], np.ndarray] | None = None):
        self.seed = seed
        self.config = config
        self.prune = prune

    def _pruned(self, X: np.ndarray) -> np.ndarray:
        return np.where(self.zeroed_, 0.0, X)

    def fit(self, X: np.ndarray, y: np.ndarray) -> PrototypicalClassifier:
        import torch

        X, y = _check_labels(X, y)
        self.zeroed_ = np.zeros(X.shape[1], dtype=bool)
        if self.prune is not None:
            columns = self.prune(X.shape[1])
            self.zeroed_[columns] = ~welch_keep(X[:, columns], y)
            X = self._pruned(X)
        cfg = self.config
        per_class = cfg.n_shot + cfg.n_query
        counts = np.bincount(y, minlength=2)
        if counts.min() < per_class:
            raise ValueError(f"prototypical network needs >= {per_class} rows per class, got {counts.tolist()}")
        self.mean_ = X.mean(axis=0)
        std = X.std(axis=0)
        self.std_ = np.where(std > 0, std, 1.0)
        data = torch.tensor((X - self.mean_) / self.std_, dtype=torch.float32)
        rng = np.random.default_rng(self.seed)
        index = [np.flatnonzero(y == c) for c in (0, 1)]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.net_ = _embedding_net(X.shape[1], cfg)
        opt = torch.optim.Adam(self.net_.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.net_.train()
        with _one_torch_thread():
            for _ in range(cfg.epochs * cfg.episodes_per_epoch):
                rows = np.stack([rng.choice(idx, per_class, replace=False) for idx in index])
                z = self.net_(data[torch.as_tensor(rows.reshape(-1))]).reshape(2, per_class, -1)
                query = z[:, cfg.n_shot:]
                loss = prototypical_loss(z[:, :cfg.n_shot], query) + bottleneck_penalty(
                    query.reshape(-1, query.shape[-1]), cfg.ib_beta)
                opt.zero_grad()
                loss.backward()
                opt.step()
            self.net_.eval()
            with torch.no_grad():
                emb = self.net_(data)
                self.prototypes_ = torch.stack([emb[torch.as_tensor(idx)].mean(dim=0) for idx in index])
        return self

    def score(self, X: np.ndarray) -> np.ndarray:
        import torch

        X = self._pruned(require_matrix("features", X, n_cols=self.mean_.shape[0]))
        with torch.no_grad(), _one_torch_thread():
            emb = self.net_(torch.tensor((X - self.mean_) / self.std_, dtype=torch.float32))
            logits = -torch.cdist(emb, self.prototypes_)
            proba = torch.softmax(logits.double(), dim=1)[:, 1].numpy()
        return require_finite("prototypical-network scores", proba)


CLASSIFIERS: dict[str, Callable[[int], Classifier]] = {
    "gaussian_nb": lambda seed: NaiveBayesClassifier(),  # deterministic, no seed needed
    "protonet": lambda seed: PrototypicalClassifier(seed),
    "veilprobe_protonet": lambda seed: PrototypicalClassifier(seed, prune=difference_columns),
}


def make_classifier(name: str, seed: int = 0) -> Classifier:
    """A fresh, unfitted classifier of family ``name``."""
    if name not in CLASSIFIERS:
        raise KeyError(f"unknown classifier {name!r}; known: {sorted(CLASSIFIERS)}")
    return CLASSIFIERS[name](seed)
