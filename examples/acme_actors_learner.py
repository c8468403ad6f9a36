"""Acme-style actors and a learner on fastreplay, in separate processes.

Persona: you have Acme (or plain Reverb) code: actors that feed a
``NStepTransitionAdder``, a learner that iterates a dataset and updates
priorities, and checkpoints. Here the actors are processes that reach the
server with ``Client("localhost:PORT")``, the learner trains a torch
Q-network from ``client.dataset`` and the table is checkpointed and
restored. ``import fastreplay as reverb`` is the only change from Reverb.

Run: ``python examples/acme_actors_learner.py`` (``--quick`` for fewer steps).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile

import numpy as np

import fastreplay as reverb
from fastreplay import adders

TABLE = adders.DEFAULT_PRIORITY_TABLE
N_STEP, DISCOUNT = 3, 0.99


def make_tables() -> list[reverb.Table]:
    return [reverb.Table(
        name=TABLE,
        sampler=reverb.selectors.Prioritized(priority_exponent=0.6),
        remover=reverb.selectors.Fifo(),
        max_size=100_000,
        rate_limiter=reverb.rate_limiters.MinSize(100),
    )]


def actor(address: str, seed: int, episodes: int) -> None:
    """An actor process: a random policy in a toy environment."""
    client = reverb.Client(address)
    rng = np.random.default_rng(seed)
    with adders.NStepTransitionAdder(client, n_step=N_STEP, discount=DISCOUNT) as adder:
        for _ in range(episodes):
            obs = rng.standard_normal(4).astype(np.float32)
            adder.add_first(adders.restart(obs))
            for t in range(1, 51):
                obs = rng.standard_normal(4).astype(np.float32)
                reward = float(obs[0] > 0)
                step = (adders.termination(reward, obs) if t == 50
                        else adders.transition(reward, obs))
                adder.add(np.int64(rng.integers(2)), step)


def learner(client: reverb.Client, steps: int) -> float:
    """A learner: batches from a dataset, torch updates, new priorities."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)  # a tiny network: one thread is fastest
    q = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(q.parameters(), lr=0.01)
    with client.dataset(TABLE, batch_size=128, prefetch=2) as dataset:
        for _, (info, batch) in zip(range(steps), dataset, strict=False):
            t = {k: torch.from_numpy(np.asarray(v)) for k, v in batch._asdict().items()
                 if k != "extras"}
            q_sa = q(t["observation"]).gather(1, t["action"][:, None]).squeeze(1)
            with torch.no_grad():
                y = t["reward"] + t["discount"] * q(t["next_observation"]).max(1).values
            weights = torch.from_numpy(info.weights(beta=0.4).astype(np.float32))
            td = y - q_sa
            loss = (weights * td.pow(2)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            client.update_priorities(TABLE, info.key, td.abs().detach().numpy() + 1e-3)
    return float(loss.detach())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer episodes and steps")
    args = parser.parse_args()
    episodes, steps = (10, 50) if args.quick else (100, 500)

    checkpointer = reverb.checkpointers.DefaultCheckpointer(tempfile.mkdtemp())
    server = reverb.Server(make_tables(), checkpointer=checkpointer)
    address = f"localhost:{server.port}"
    ctx = mp.get_context("spawn")
    actors = [ctx.Process(target=actor, args=(address, seed, episodes))
              for seed in (1, 2)]
    for p in actors:
        p.start()
    for p in actors:
        p.join(timeout=120)
        if p.exitcode != 0:
            raise SystemExit(f"actor {p.pid} failed (exit code {p.exitcode})")

    client = reverb.Client(address)
    loss = learner(client, steps)
    stored = client.server_info()[TABLE].current_size
    path = client.checkpoint()
    server.stop()

    restored = reverb.Server(make_tables(), checkpointer=checkpointer)
    again = reverb.Client(f"localhost:{restored.port}").server_info()[TABLE]
    again_size = again.current_size
    restored.stop()
    print(f"{stored} transitions from 2 actor processes; last loss {loss:.4f}; "
          f"checkpoint {path} restored {again_size}")


if __name__ == "__main__":
    main()
