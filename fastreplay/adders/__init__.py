"""Acme-style adders over fastreplay's writers (``acme.adders.reverb``).

An actor loop hands each timestep to an adder, which writes items to the
client's tables in Acme's layout, so Acme learners read them unchanged::

    adder = adders.NStepTransitionAdder(client, n_step=3, discount=0.99)
    adder.add_first(timestep)
    while not timestep.last():
        action = policy(timestep.observation)
        timestep = env.step(action)
        adder.add(action, timestep)

``NStepTransitionAdder`` writes ``Transition`` items, ``SequenceAdder``
``Step`` items of ``[T, ...]`` columns.  Timesteps are ``dm_env.TimeStep``
or this package's ``TimeStep`` (``restart``, ``transition``,
``termination``, ``truncation`` build them); dm_env is not needed.
"""

from fastreplay.adders.base import (
    DEFAULT_PRIORITY_TABLE,
    PriorityFn,
    ReverbAdder,
    Step,
    StepType,
    TimeStep,
    Trajectory,
    Transition,
    restart,
    termination,
    transition,
    truncation,
)
from fastreplay.adders.n_step import NStepTransitionAdder, n_step_return
from fastreplay.adders.sequence import EndBehavior, SequenceAdder, episode_masks

__all__ = [
    "DEFAULT_PRIORITY_TABLE",
    "EndBehavior",
    "NStepTransitionAdder",
    "PriorityFn",
    "ReverbAdder",
    "SequenceAdder",
    "Step",
    "StepType",
    "TimeStep",
    "Trajectory",
    "Transition",
    "episode_masks",
    "n_step_return",
    "restart",
    "termination",
    "transition",
    "truncation",
]
