"""Run by tests/integrations/test_trl.py under ``accelerate launch --num_processes 2`` (gloo, CPU): each process
scores its half of a generation batch whose middle group spans both processes; rank 0 writes every process's
rollouts and advantages to the JSON file ``argv[2]`` for the test to check against ``credit.score``."""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch.distributed  # noqa: E402
from accelerate.utils import gather_object  # noqa: E402

from tests.integrations.test_trl import G, Recording, dataset, rollout_trainer  # noqa: E402

PER_PROCESS = 6  # 2 processes x 6 rollouts = 3 groups of 4: group 1 has two rollouts on each process


def main() -> None:
    model_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    work = out.parent / f"rank{os.environ.get('RANK', '0')}"
    ds = dataset(("walk a", "walk b", "walk c"))
    trainer = rollout_trainer(model_dir, work, rollout=Recording(), ds=ds, per_device_train_batch_size=PER_PROCESS)
    rank, size = trainer.accelerator.process_index, trainer.accelerator.num_processes
    rows = [dict(row) for row in ds for _ in range(G)][rank * PER_PROCESS:(rank + 1) * PER_PROCESS]
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows)
    rec = trainer.rollout_func.out
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith(("credit/", "groups/"))}
    mine = {"rank": rank, "size": size, "record": rec, "advantages": output["advantages"].tolist(),
            "completion_mask": output["completion_mask"].tolist(), "metrics": metrics}
    everyone = gather_object([mine])
    if rank == 0:
        out.write_text(json.dumps(sorted(everyone, key=lambda x: x["rank"])))
    # leave together, with the process group torn down: a rank that exits while gloo's threads still serve the
    # other can abort in C++ at interpreter shutdown ("terminate called without an active exception", SIGABRT)
    trainer.accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
