"""The host bootstrap's provider at its first module path.

Pulumi's dynamic provider host unpickles the provider from each resource's state by its module
path (dill pickles the class by reference), and states written before the bootstrap moved to
lab/bootstrap/resource.py name `lab.hosts.HostBootstrapProvider`: a lab made then can still be
updated and destroyed through this name.
"""

from lab.bootstrap.resource import HostBootstrapProvider

__all__ = ["HostBootstrapProvider"]
