"""ALF's experience replayers on fastreplay's core.

A drop-in for ``alf.experience_replayers.experience_replay``: the same
classes, constructors and methods, ALF's nests in and out (namedtuple,
dict, tuple, list, ``()`` for empty fields; torch tensors), batch-major
``[B, T, ...]`` results::

    from fastreplay.integrations.alf import (
        Experience, SyncUniformExperienceReplayer, TensorSpec)

    spec = Experience(observation=TensorSpec((8,)), reward=TensorSpec(()),
                      env_id=TensorSpec((), torch.int64))
    replayer = SyncUniformExperienceReplayer(spec, batch_size=16, max_length=1000)
    replayer.observe(exp)               # exp.observation: [16, 8], ...
    batch = replayer.replay(256, 8)     # batch.observation: [256, 8, 8]

``Experience`` and ``TensorSpec`` are ALF's own when ``alf`` is importable,
compatible definitions otherwise.  Requires torch (``fastreplay[alf]``);
``import fastreplay`` does not import this module.

Differences from ALF (fixes): ``OnetimeExperienceReplayer.total_size`` is 0
before any observe (A1); ``SyncUniformExperienceReplayer.replay_all()``
returns each env's steps oldest first after the ring wrapped (A2); the first
``CyclicOneTimeExperienceReplayer.replay_all()`` returns exactly the steps
observed (A3).
"""

from __future__ import annotations

from fastreplay.integrations._alf_nest import Experience, TensorSpec
from fastreplay.integrations._alf_replayers import (
    CyclicOneTimeExperienceReplayer,
    OnetimeExperienceReplayer,
    SyncUniformExperienceReplayer,
)

#: The torch-era name of ``SyncUniformExperienceReplayer``.
SyncExperienceReplayer = SyncUniformExperienceReplayer

__all__ = ["OnetimeExperienceReplayer", "SyncUniformExperienceReplayer",
           "SyncExperienceReplayer", "CyclicOneTimeExperienceReplayer", "Experience",
           "TensorSpec"]
