"""What several of `labctl`'s commands share: the console they print through, the `--stack`
option, how a signal stops them, and reading the trainer's run folders, locally or on the NFS
export, through the trainer's own reader (trainer/records/runfolders.py), which its commands
read their files with too.
"""
