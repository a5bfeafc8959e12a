# Sourced by dev.sh and test.sh. Each local cluster's components (kube-apiserver, controller-manager, scheduler,
# Kueue) watch files with inotify; Debian's default of 128 instances per user runs out with a few clusters on one
# machine (a test session starts a second one). As root, raise it once; otherwise say what to do.
ensure_inotify_instances() {
  local current
  current=$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 1024)
  if [ "$current" -ge 1024 ]; then return; fi
  if [ "$(id -u)" = "0" ] && sysctl -qw fs.inotify.max_user_instances=1024 2>/dev/null; then
    echo "[cluster] raised fs.inotify.max_user_instances from $current to 1024 (local clusters watch files)"
  else
    echo "[cluster] fs.inotify.max_user_instances is $current; local clusters may fail to start: as root run" \
      "'sysctl -w fs.inotify.max_user_instances=1024'"
  fi
}
