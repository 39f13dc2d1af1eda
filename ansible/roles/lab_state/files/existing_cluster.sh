#!/bin/sh
# Which Kubernetes distributions and container runtimes are on this node, and whether the lab
# installed them. One line each that is present: "NAME|ours" or "NAME|foreign|EVIDENCE|FIX".
# site.yml refuses to go on over a foreign one, reset.yml removes only its own, and
# `labctl doctor` reports the same lines, so all three judge a node the same way.
# $1: the lab's state directory on the node; $2: the distribution the stack installs.
state="$1"
distribution="$2"

found() {
  for path in "$@"; do
    [ -e "$path" ] && printf '%s ' "$path"
  done
}

# The lab writes state/installed/NAME before it installs NAME. Labs made before it kept that
# mark are known by files only the lab writes: its own k3s unit, its kubeadm configuration.
ours() {
  [ -e "$state/installed/$1" ] && return 0
  case "$1" in
    k3s) grep -qs 'Managed by the K8sCIFAR lab' /etc/systemd/system/k3s.service /etc/systemd/system/k3s-agent.service ;;
    kubeadm) [ -e /etc/kubernetes/k8scifar-kubeadm.yaml ] ;;
    *) return 1 ;;
  esac
}

report() {
  name="$1" evidence="$2" fix="$3"
  if ours "$name"; then
    echo "$name|ours"
  elif [ -n "$evidence" ]; then
    echo "$name|foreign|${evidence% }|$fix"
  fi
}

# What k3s's installer and a running k3s leave (k3s install.sh; docs.k3s.io/installation/uninstall).
report k3s "$(found /usr/local/bin/k3s /etc/systemd/system/k3s.service /etc/systemd/system/k3s-agent.service \
  /etc/rancher/k3s/config.yaml /etc/rancher/k3s/k3s.yaml /var/lib/rancher/k3s)" \
  "uninstall it (/usr/local/bin/k3s-uninstall.sh or k3s-agent-uninstall.sh) or use another machine"

# What kubeadm init/join and its kubelet leave (kubeadm reset's list of what it cleans).
report kubeadm "$(found /etc/kubernetes/kubelet.conf /etc/kubernetes/admin.conf \
  /etc/kubernetes/manifests/kube-apiserver.yaml /var/lib/kubelet/config.yaml /var/lib/etcd/member)" \
  "remove that cluster first (kubeadm reset, then its packages) or use another machine"

# k3s brings its own containerd; kubeadm reconfigures and restarts the machine's, under whatever
# Docker or another tool runs in it. A containerd the kubeadm role installed counts as the lab's.
if [ "$distribution" = kubeadm ] && ! ours kubeadm; then
  evidence="$(found /usr/bin/dockerd /usr/bin/containerd /usr/local/bin/containerd /run/containerd/containerd.sock)"
  [ -n "$evidence" ] && echo "containerd|foreign|${evidence% }|set distribution: k3s (it runs its own containerd) or use a machine without Docker or containerd"
fi
exit 0
