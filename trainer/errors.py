"""The base of every error whose message is complete for a person: printed without a traceback."""


class TrainerError(Exception):
    """Bad input (flags, environment, dataset, sweep file, checkpoint) named with its fix."""
