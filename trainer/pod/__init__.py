"""What serves a rank's pod around the run: its life from the rendezvous to the release of its GPUs,
its readiness, the hand-off to the cluster, its live figures, and what a run carries besides its
numbers."""
