"""A DQN loop ported from cpprb / Stable-Baselines3 to fastreplay.

Persona: you have a DQN with a cpprb ``PrioritizedReplayBuffer`` (or SB3's
``ReplayBuffer``) and want fastreplay's speed without changing the loop.
The buffer here is prioritized (PER, ``alpha``), returns 3-step transitions
(``n_step``/``gamma``, cpprb's ``Nstep``), feeds a torch Q-network without
copies, and is saved and loaded between "runs".

Run: ``python examples/dqn_replay_buffer.py`` (a few seconds on a CPU;
``--quick`` for fewer steps).
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile

import numpy as np
import torch

from fastreplay import ReplayBuffer

GAMMA, N_STEP = 0.95, 3


class Corridor:
    """A toy environment: walk right along 8 cells to the goal (reward 1)."""

    size = 8

    def reset(self) -> np.ndarray:
        self.pos, self.t = 0, 0
        return self._obs()

    def _obs(self) -> np.ndarray:
        return np.eye(self.size, dtype=np.float32)[self.pos]

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        self.pos = max(0, min(self.size - 1, self.pos + (1 if action else -1)))
        self.t += 1
        done = self.pos == self.size - 1 or self.t == 30
        return self._obs(), float(self.pos == self.size - 1), done


def train(rb: ReplayBuffer, q: torch.nn.Module, steps: int, seed: int) -> float:
    env, rng = Corridor(), np.random.default_rng(seed)
    target = torch.nn.Linear(env.size, 2)
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=0.05)
    obs, returns, episode_return = env.reset(), [], 0.0
    for step in range(steps):
        eps = max(0.05, 1.0 - step / (steps / 2))
        with torch.no_grad():
            greedy = int(q(torch.from_numpy(obs)).argmax())
        action = int(rng.integers(2)) if rng.random() < eps else greedy
        next_obs, reward, done = env.step(action)
        rb.add(obs=obs, action=action, reward=reward, next_obs=next_obs, done=done)
        obs, episode_return = next_obs, episode_return + reward
        if done:
            rb.on_episode_end()               # closes the n-step window
            obs, returns, episode_return = env.reset(), returns + [episode_return], 0.0
        if len(rb) < 64:
            continue
        batch = rb.sample(64, beta=0.4)       # numpy arrays; weights are float32
        b = {k: torch.from_numpy(v) for k, v in batch.items() if k != "indexes"}
        q_sa = q(b["obs"]).gather(1, b["action"].long()[:, None]).squeeze(1)
        with torch.no_grad():                 # reward is already the n-step return
            bootstrap = target(b["next_obs"]).max(1).values
            y = b["reward"] + GAMMA ** N_STEP * (1 - b["done"].float()) * bootstrap
        td = y - q_sa
        loss = (b["weights"] * td.pow(2)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        rb.update_priorities(batch["indexes"], td.abs().detach().numpy() + 1e-3)
        if step % 100 == 0:
            target.load_state_dict(q.state_dict())
    return float(np.mean(returns[-10:])) if returns else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    args = parser.parse_args()
    steps = 600 if args.quick else 1_500
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a tiny network: one thread is fastest
    spec = {"obs": (np.float32, (Corridor.size,)), "action": (np.int64, ()),
            "reward": (np.float32, ()), "next_obs": (np.float32, (Corridor.size,)),
            "done": (np.bool_, ())}
    rb = ReplayBuffer(50_000, alpha=0.6, seed=0, n_step=N_STEP, gamma=GAMMA, spec=spec)
    q = torch.nn.Linear(Corridor.size, 2)
    first = train(rb, q, steps, seed=1)
    path = pathlib.Path(tempfile.mkdtemp()) / "replay"
    rb.save(path)                             # transitions, priorities, settings
    restored = ReplayBuffer.load(path)        # e.g. in the next run
    assert len(restored) == len(rb)
    second = train(restored, q, steps // 3, seed=2)
    print(f"stored {len(restored)} transitions; mean return {first:.2f} "
          f"then {second:.2f} after reloading")


if __name__ == "__main__":
    main()
