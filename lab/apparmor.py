"""The AppArmor profile the image build runs under, named by the build pod and loaded by the roles.

Rootless BuildKit's rootlesskit creates a user namespace. Ubuntu 24.04 sets
`kernel.apparmor_restrict_unprivileged_userns=1`: an unconfined process may no longer do that,
only one confined by a profile with the `userns` rule (Ubuntu's announcement,
ubuntu.com/blog/ubuntu-23-10-restricted-unprivileged-user-namespaces; moby/moby#47480,
rootless-containers/rootlesskit#421, moby/buildkit#7073). Rather than turning the restriction off
for the whole host, the prereq role loads a profile that is unconfined but for
allowing `userns`, on every node with AppArmor, and the build pod names it as a Localhost profile.
"""

from __future__ import annotations

# The profile's name, as `profile NAME` in the file and as the pod's localhostProfile.
BUILD_PROFILE = "k8scifar-buildkit"
# The kernel setting that restricts user namespaces to profiles that allow them (absent elsewhere).
USERNS_SYSCTL = "kernel.apparmor_restrict_unprivileged_userns"


def role_vars() -> dict[str, object]:
    """The profile's name for the prereq role (inventory group variables)."""
    return {"lab_build_apparmor_profile": BUILD_PROFILE}
