"""What `labctl`'s commands share: the console, the stack option, run folders, node checks."""
