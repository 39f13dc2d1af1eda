"""What a run leaves behind: its checkpoints, written atomically, the run folder's files, its
figures, and a sweep's leaderboard."""
