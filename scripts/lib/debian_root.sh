# Helpers for a minimal Debian root made with debootstrap, shared by scripts/debian13_stage.sh
# (the test suite's LibTorch 2.6 stage) and scripts/fresh_machine_check.sh. Source it; needs root.

# The mirror apt uses on this machine: the first `URIs:` of debian.sources (or `deb` line).
debian_mirror() {
  local m
  m=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
  if [[ -z $m ]]; then
    m=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  fi
  echo "${m:-http://deb.debian.org/debian}"
}

# debian_source_download PACKAGE SUITE DEST: the source package's files (.dsc, orig tarball, Debian
# diff; checked against the signed index) into DEST, from this machine's mirror, through a private
# apt configuration (one deb-src line, private lists and cache) that leaves apt's own alone.
debian_source_download() {
  local package=$1 suite=$2 dest=$3 work
  work=$(mktemp -d)
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$dest"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(debian_mirror) $suite main" \
    >"$work/sources.list"
  local apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
  local rc=0
  apt-get "${apt_opts[@]}" -qq update &&
    (cd "$dest" && apt-get "${apt_opts[@]}" -qq source --download-only "$package/$suite") || rc=$?
  rm -rf "$work"
  return $rc
}

# make_debian_root SUITE DIR: debootstrap --variant=minbase SUITE into DIR (into DIR.partial
# first, so an interrupted run never leaves a half-made DIR behind).
make_debian_root() {
  local suite=$1 dir=$2
  if ! command -v debootstrap >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
  fi
  remove_debian_root "$dir.partial" || return 1
  mkdir -p "$(dirname "$dir")"
  echo "debootstrap --variant=minbase $suite $dir $(debian_mirror)"
  debootstrap --variant=minbase "$suite" "$dir.partial" "$(debian_mirror)" >"$dir.debootstrap.log" 2>&1 || {
    tail -n 30 "$dir.debootstrap.log" >&2
    echo "debootstrap of $suite failed (log: $dir.debootstrap.log)" >&2
    return 1
  }
  mv "$dir.partial" "$dir"
}

# mount_debian_root DIR: proc and dev inside DIR (idempotent); umount_debian_root DIR undoes it.
# Callers set their `trap 'umount_debian_root DIR' EXIT` before calling it, so that a failure
# between the two mounts leaves nothing mounted.
mount_debian_root() {
  local dir=$1
  mountpoint -q "$dir/proc" || mount -t proc proc "$dir/proc"
  mountpoint -q "$dir/dev" || mount --bind /dev "$dir/dev"
  mkdir -p "$dir/dev/shm"
  if [[ -e /etc/resolv.conf ]]; then cp -L /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true; fi
}
umount_debian_root() {
  local dir=$1
  mountpoint -q "$dir/dev" && umount -l "$dir/dev" || true
  mountpoint -q "$dir/proc" && umount -l "$dir/proc" || true
}

# mounts_below DIR: the mount points strictly below DIR, deepest first, one per line. /proc/mounts
# writes a space, tab, newline and backslash in a path as \040, \011, \012 and \134; they are
# decoded before comparing, so a root whose path has a space is matched too.
mounts_below() {
  local dir m
  dir=$(realpath -m "$1")
  while read -r _ m _; do
    m=${m//\\040/ }
    m=${m//\\011/$'\t'}
    m=${m//\\012/$'\n'}
    m=${m//\\134/\\}
    if [[ $m == "$dir"/* ]]; then printf '%s\n' "$m"; fi
  done </proc/mounts | sort -r
}

# umount_below DIR: lazily unmounts everything mounted below DIR (nested roots included).
umount_below() {
  local m
  while IFS= read -r m; do
    [[ -n $m ]] && { umount -l "$m" || true; }
  done < <(mounts_below "$1")
}

# remove_debian_root DIR: unmounts everything mounted below DIR (deepest first, nested roots
# included), then deletes DIR; refuses to delete while anything is still mounted there, and the
# delete itself stays on DIR's file system (rm --one-file-system), so it can never walk into the
# machine's own /dev through a bind mount.
remove_debian_root() {
  local dir
  dir=$(realpath -m "$1")
  [[ -e $dir ]] || return 0
  umount_below "$dir"
  if [[ -n $(mounts_below "$dir") ]]; then
    echo "remove_debian_root: something is still mounted below $dir; not deleting it" >&2
    return 1
  fi
  rm -rf --one-file-system "$dir"
}

# lock_debian_root DIR: takes an exclusive lock on DIR (a lock file beside it, held on file
# descriptor 9 until the calling shell exits), waiting while another run of the test suite uses
# the same cached root, so that neither unmounts or rebuilds it under the other.
lock_debian_root() {
  local lock="$1.lock"
  mkdir -p "$(dirname "$lock")"
  exec 9>"$lock"
  if ! flock -n 9; then
    echo "== waiting for $lock (another test run is using $1)"
    flock 9
  fi
}

# in_debian_root DIR COMMAND: runs COMMAND with bash in DIR, as root, in a clean environment.
in_debian_root() {
  local dir=$1
  shift
  chroot "$dir" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    ${CI:+CI=$CI} bash -c "$*"
}

# copy_checkout SRC DEST: the checkout's files as git sees them (tracked, and untracked ones that
# are not ignored: what a commit of the work tree would hold), without .git and build folders;
# outside a git work tree, everything but .git, build*/ and demo_out/.
copy_checkout() {
  local src=$1 dest=$2
  rm -rf "$dest"
  mkdir -p "$dest"
  if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$src" && git ls-files -z --cached --others --exclude-standard |
      xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
      tar --null -T - -cf -) | tar -xf - -C "$dest"
  else
    (cd "$src" && tar --exclude=./.git --exclude='./build*' --exclude=./demo_out -cf - .) |
      tar -xf - -C "$dest"
  fi
}

# seconds_since START: whole seconds elapsed since START (from `date +%s`).
seconds_since() { echo $(($(date +%s) - $1)); }
