"""Every join secret the bootstrap hands out passes the rules of the daemon that reads it.

The rules are in tests/support/rules/token_rules.py, each restated from k3s's or Kubernetes' source; the
agent's composed secure token is checked on the rendered config.yaml (test_daemon_files.py).
"""

from __future__ import annotations

import hashlib

import pytest

from lab.bootstrap.tokens import PLAYBOOK_VARIABLES, kept_tokens, new_tokens, playbook_secrets
from tests.support.rules.token_rules import (
    K3sToken,
    k3s_agent_join_problem,
    k3s_agent_token_problem,
    k3s_server_token_problem,
    kubeadm_token_problem,
    parse_k3s_token,
)

# The shape every lab was given before: kubeadm's, which k3s's server refuses.
OLD_TOKEN = "abcdef.0123456789abcdef"
DRAWS = 200


def test_every_token_the_bootstrap_draws_is_accepted() -> None:
    drawn = [new_tokens() for _ in range(DRAWS)]
    problems = [
        (name, problem)
        for tokens in drawn
        for name, problem in [
            ("k3s server token", k3s_server_token_problem(tokens["k3s_token"])),
            ("k3s agent token", k3s_agent_token_problem(tokens["k3s_agent_token"])),
            ("kubeadm bootstrap token", kubeadm_token_problem(tokens["kubeadm_token"])),
        ]
        if problem
    ]
    assert problems == []
    # Random, and the agent never gets the server's secret (which is cluster admin).
    assert len({t["k3s_token"] for t in drawn}) == DRAWS
    assert all(t["k3s_token"] != t["k3s_agent_token"] for t in drawn)


def test_the_server_token_rule_refuses_the_old_kubeadm_shaped_token() -> None:
    """k3s's own end-to-end test "Verify server fails to start with bootstrap token" uses this shape."""
    assert "failed to normalize server token" in (k3s_server_token_problem(OLD_TOKEN) or "")
    assert parse_k3s_token(OLD_TOKEN) == K3sToken(ca_hash="", bootstrap=OLD_TOKEN)
    assert k3s_server_token_problem("") is not None
    assert k3s_server_token_problem("plain-secret") is None


def test_the_agent_join_rule_wants_the_ca_pinned_and_the_agent_secret() -> None:
    ca_hash = hashlib.sha256(b"a CA").hexdigest()
    agent = "a" * 64
    assert k3s_agent_join_problem(f"K10{ca_hash}::node:{agent}", ca_hash, agent) is None
    assert "pin" in (k3s_agent_join_problem(agent, ca_hash, agent) or "")
    assert (
        k3s_agent_join_problem(f"K10{ca_hash[:10]}::node:{agent}", ca_hash, agent)
        == "invalid token CA hash length"
    )
    assert "node:" in (k3s_agent_join_problem(f"K10{ca_hash}::server:{agent}", ca_hash, agent) or "")


def test_kubeadm_rule_refuses_other_shapes() -> None:
    assert kubeadm_token_problem(OLD_TOKEN) is None
    assert kubeadm_token_problem("ABCDEF.0123456789abcdef") is not None
    assert kubeadm_token_problem("a" * 64) is not None


def test_tokens_reach_the_playbook_under_their_variables() -> None:
    tokens = new_tokens()
    assert set(playbook_secrets(tokens)) == set(PLAYBOOK_VARIABLES.values())
    assert sorted(playbook_secrets(tokens).values()) == sorted(tokens.values())


@pytest.mark.parametrize("stored", [OLD_TOKEN, None, {"k3s_token": "x"}])
def test_an_update_replaces_tokens_from_before_they_were_split(stored: object) -> None:
    kept = kept_tokens(stored)
    assert set(kept) == set(PLAYBOOK_VARIABLES)
    assert k3s_server_token_problem(kept["k3s_token"]) is None


def test_an_update_keeps_the_lab_s_tokens() -> None:
    tokens = new_tokens()
    assert kept_tokens(dict(tokens)) == tokens
