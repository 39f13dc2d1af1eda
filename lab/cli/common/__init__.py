"""What several of `labctl`'s commands share: the console they print through, the `--stack`
option, how a signal stops them, and reading the trainer's run folders, locally or on the NFS
export.

A package, not one module: `runfolders.py` is sent alone to the NFS server's `python3`, so it must
stay a file of its own, and the rest together would be a module of several jobs.
"""
