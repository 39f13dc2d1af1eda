"""The host bootstrap: a Pulumi dynamic resource that runs the lab's playbooks over the machines
(inventory, join tokens, the playbook runner and its process) and hands back the kubeconfig."""
