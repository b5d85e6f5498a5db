"""Training inputs prepared off the critical path: gene budget, thinned view, blocks and collation in the loader.

The CPU work of a micro-batch (the teacher's gene budget, the depth-thinned student view, the graph BFS of
:func:`~biomjepa.train.blocks.sample_blocks` and :func:`~biomjepa.train.inputs.build_inputs`) depends only on
the cells and on ``block_rng(seed, step, rank, micro)``, never on the model. :class:`PreparedStream` runs it
where the cells are read, inside the ``DataLoader``'s workers (``data.num_workers``), so with workers it runs
while the model steps; the main process only moves the tensors to the device. The ``j``-th micro-batch a rank
consumes (counted from the run's start, resumes included) is prepared with ``step = j // accumulation`` and
``micro = j % accumulation`` whatever the worker that prepares it: the same cells at the same position get the
same blocks in a worker as in the main process. (Which cells make up the ``j``-th batch depends on the number of
workers, as it always has: :class:`~biomjepa.data.shards.ShardStream` deals the corpus to (rank, worker) units.)

The workers leave SIGTERM and SIGINT to the main process (:func:`leave_stops_to_main`): a stop sent to the whole
process group (``pkill -f``, Ctrl-C in a terminal, ``kill -- -PGID``, ``scancel``) reaches them too, and a worker
killed by it would make torch raise in the main process before it could save (issue 57).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

import torch

from .blocks import BlockConfig, block_rng, sample_blocks
from .inputs import build_inputs
from .views import gene_budget, thin_cells


@dataclass
class InputPreparer:
    """What :func:`prepare` needs: the graph, the block settings and the data/loss knobs (picklable, no model)."""

    graph: object
    blocks: BlockConfig
    vocab_size: int
    seed: int
    rank: int
    teacher_genes: int | None
    thin_student: float | None
    objective: str
    token_cap: int

    @classmethod
    def of(cls, cfg, graph, vocab_size: int, rank: int) -> InputPreparer:
        return cls(graph, cfg.block_config(), vocab_size, cfg.run.seed, rank, cfg.data.teacher_genes,
                   cfg.data.thin_student, cfg.loss.objective, cfg.loss.token_cap)

    def __call__(self, batch, step: int, micro: int):
        """``(TrainInputs on the CPU, cell ids)`` of one micro-batch of ``batch`` (a :class:`CellBatch`)."""
        rng = block_rng(self.seed, step, self.rank, micro)
        cells = gene_budget(batch.cells, self.teacher_genes, rng)
        thinned, seen = thin_cells(cells, self.thin_student, rng) if self.thin_student else (None, None)
        sample = sample_blocks(cells.indptr, cells.genes, self.graph, self.blocks, rng,
                               vocab_size=self.vocab_size, context_eligible=seen)
        inputs = build_inputs(cells, sample, self.vocab_size, objective=self.objective, token_cap=self.token_cap,
                              rng=rng, whole=batch.cells, student_cells=thinned)
        return inputs, batch.ids


def leave_stops_to_main(worker_id: int) -> None:
    """``worker_init_fn`` of the training loader: SIGTERM and SIGINT are ignored in its workers.

    The main process stops the run (:class:`~biomjepa.train.signals.GracefulStop`: it finishes the step, saves,
    then ends the loader, whose workers exit when told to); a worker whose main process dies exits by itself
    (torch's ``ManagerWatchdog`` sees its parent change). SIGKILL still ends a worker at once.
    """
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


class PreparedStream(torch.utils.data.IterableDataset):
    """``stream``'s batches (a :class:`~biomjepa.data.shards.ShardStream`) as prepared training inputs.

    ``start`` is the index of the first micro-batch the stream gives (``step × accumulation`` of a resumed
    run); with ``W`` loader workers, worker ``w``'s ``k``-th batch is micro-batch ``start + k·W + w``, the
    order in which the ``DataLoader`` hands them out.
    """

    def __init__(self, stream, prepare: InputPreparer, *, start: int, accumulation: int) -> None:
        super().__init__()
        self.stream, self.prepare, self.start, self.accumulation = stream, prepare, start, accumulation

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, n_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is not None:
            torch.set_num_threads(1)  # workers share the cores with the model's threads
        for k, batch in enumerate(self.stream):
            j = self.start + k * n_workers + worker
            yield self.prepare(batch, j // self.accumulation, j % self.accumulation)
