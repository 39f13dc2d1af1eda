"""Everything inside the lab's Kubernetes cluster, one module per concern; `Cluster`
(lab.cluster.component) composes them.

Nothing is imported here: labctl reads light modules of this package (the build context, the
training pod's names) without loading pulumi_kubernetes.
"""
