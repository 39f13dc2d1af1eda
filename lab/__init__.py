"""The lab's orchestrator, one package per part, in the order a `pulumi up` runs through them:

- `config`: the stack's configuration, typed and checked, and the facts it rests on;
- `bootstrap`: the host bootstrap, a Pulumi resource running Ansible over the machines;
- `remote`: commands on the nodes over SSH, and what they say about the cluster;
- `cluster`: the Kubernetes objects, declared through the bootstrap's kubeconfig;
- `validation`: the testinfra suite that checks a lab, and its runner;
- `cli`: `labctl`, a module or package per command, and what several share in `cli/common`;
- `testbed`: the local test machines `labctl try` and the integration tests boot.

`paths` finds the checkout's folders; `hosts` keeps the bootstrap's provider at the module path
states written before the move pickled it under.
"""
