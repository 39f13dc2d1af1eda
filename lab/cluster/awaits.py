"""How long `pulumi up` waits for a workload that Kueue also times, in one place so the two agree.

pulumi-kubernetes awaits a StatefulSet until its rollout is ready, up to the resource's custom
timeout; Kueue gives an admitted workload its own time to get every pod Ready (lab.cluster.gang).
"""

from __future__ import annotations

import re

# `pulumi up` waits for every rank to be Ready, i.e. training. The image is on the nodes (the
# dataset Job ran it) and a rank needs seconds to join and step, so a set that is not training
# after this long is crash-looping or stuck: `up` fails and pulumi-kubernetes reports the pods.
TRAINING_TIMEOUT = "15m"


def minutes(duration: str) -> int:
    """Whole minutes of a duration written as `<n>m`, the only form the lab's timeouts use."""
    if not re.fullmatch(r"[0-9]+m", duration):
        raise ValueError(f"{duration!r} is not a duration in whole minutes such as 15m")
    return int(duration[:-1])
