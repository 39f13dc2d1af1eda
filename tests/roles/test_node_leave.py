"""The node_leave role's decisions, run by Ansible for real with kubectl replaced by a recording
stand-in: a node that leaves is drained and deleted from the server; a drain that fails (a pod
whose eviction a PodDisruptionBudget refuses until the timeout) stops the removal with kubectl's
words and leaves the node schedulable, as it was: `kubectl drain` cordons the node before it
evicts and does not take that back when the eviction fails (kubernetes/kubectl
`pkg/cmd/drain/drain.go`, `RunDrain`).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.local_play import run_tasks

# Records its arguments; lists the node; `drain` fails as kubectl does when the timeout ends an
# eviction, while $FAKE_DIR/fail exists.
FAKE_KUBECTL = """\
echo "$*" >> "$FAKE_DIR/calls"
case "$1" in
  get) echo "node/node" ;;
  drain)
    echo "node/node cordoned"
    if [ -f "$FAKE_DIR/fail" ]; then
      echo 'error when evicting pods/"trainer-1" -n "k8scifar": global timeout reached: 5m0s' >&2
      exit 1
    fi ;;
esac
"""


def _leave(work: Path) -> tuple[int, str, list[str]]:
    variables = {"node_leave_kubectl": ["kubectl"], "lab_server_name": "node"}
    done = run_tasks("node_leave", "main.yml", work / "ansible", variables, {"kubectl": FAKE_KUBECTL},
                     {"FAKE_DIR": str(work)})  # fmt: skip
    calls = (work / "calls").read_text().splitlines() if (work / "calls").exists() else []
    return done.returncode, done.stdout + done.stderr, [call.split()[0] for call in calls]


def test_a_drained_node_is_deleted_from_the_cluster(tmp_path: Path) -> None:
    rc, output, calls = _leave(tmp_path)
    assert rc == 0, output
    assert calls == ["get", "drain", "delete"]


def test_a_failed_drain_stops_with_kubectls_words_and_leaves_the_node_schedulable(tmp_path: Path) -> None:
    (tmp_path / "fail").touch()
    rc, output, calls = _leave(tmp_path)
    assert rc != 0
    assert "global timeout reached" in output, "kubectl's error must reach the operator"
    assert calls == ["get", "drain", "uncordon"], "cordoned by the drain, the node must be uncordoned"
