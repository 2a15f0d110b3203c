# Boots another installed kernel (by default Debian 12's stock 6.1) in a qemu
# VM whose root is this host's root, for scripts/verify-kernel61 and
# scripts/test-kernel61 (sourced by both, not run).
#
# The VM boots /boot's vmlinuz with Debian's own initrd plus a prepended
# /xbng-init (rdinit=) that mounts the host's root read-only over 9p and lays
# a tmpfs over it (overlayfs): the VM sees every file of the host, its writes
# stay in its own memory and vanish with it. /xbng-init then switches to that
# root and runs a stage-2 script (a host path) with proc, sysfs, devpts, a
# fresh bpffs and a tmpfs /run mounted and loopback up. The stage 2 prints on
# the console and ends with `poweroff -f`; vm_boot collects the console.
#
# Needs root, qemu-system-x86 and the kernel package (linux-image-$KV: /boot's
# vmlinuz and initrd, /lib/modules/$KV). qemu emulates (TCG) unless
# XBNG_QEMU_ACCEL names another accelerator (XBNG_QEMU_ACCEL=kvm where nested
# KVM boots a guest: on a host whose KVM hangs in the guest's early boot the
# VM never prints, and vm_boot's timeout ends it).

# The 9p and overlay modules /xbng-init loads before the root is there, in
# load order (paths under /lib/modules/$KV/kernel, without .ko).
VM_EARLY_MODS="drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_modern_dev
      drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci fs/netfs/netfs
      fs/fscache/fscache net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p fs/overlayfs/overlay"

# vm_check KV: the kernel's files are there (exit 2 otherwise).
vm_check() {
  local f
  for f in "/boot/vmlinuz-$1" "/boot/initrd.img-$1" "/lib/modules/$1/kernel"; do
    [ -r "$f" ] || { echo "${0##*/}: $f missing (linux-image-$1)" >&2; exit 2; }
  done
  command -v qemu-system-x86_64 >/dev/null ||
    { echo "${0##*/}: qemu-system-x86_64 missing (qemu-system-x86)" >&2; exit 2; }
}

# vm_initrd WORK KV STAGE2: writes WORK/initrd, Debian's initrd of KV with the
# prepended /xbng-init that runs STAGE2 (a host path) in the VM's root.
vm_initrd() {
  local work=$1 kv=$2 stage2=$3 m names=""
  mkdir -p "$work/cpio/mods"
  for m in $VM_EARLY_MODS; do
    [ -r "/lib/modules/$kv/kernel/$m.ko" ] && cp "/lib/modules/$kv/kernel/$m.ko" "$work/cpio/mods/"
    names="$names ${m##*/}"
  done
  cat >"$work/cpio/xbng-init" <<INIT
#!/bin/sh
export PATH=/usr/bin:/usr/sbin:/bin:/sbin
mkdir -p /proc /sys /dev /lower /rw /root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in$names; do
  [ -f /mods/\$m.ko ] && insmod /mods/\$m.ko
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /lower ||
  { echo "VM: 9p mount failed"; poweroff -f; }
mount -t tmpfs -o mode=0755 rw /rw && mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work root /root ||
  { echo "VM: overlay mount failed"; poweroff -f; }
umount /proc; umount /sys
mount --move /dev /root/dev 2>/dev/null || umount /dev
exec run-init /root /bin/sh $stage2
INIT
  chmod +x "$work/cpio/xbng-init"
  (cd "$work/cpio" && find . | cpio -o -H newc --quiet) >"$work/overlay.cpio"
  cat "$work/overlay.cpio" "/boot/initrd.img-$kv" >"$work/initrd"
}

# vm_prelude: the stage 2's first lines (the VM's own proc, sysfs, bpffs,
# /run and /dev/pts; loopback up).
vm_prelude() {
  cat <<'PRELUDE'
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc; mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /dev/shm
mount -t bpf bpf /sys/fs/bpf
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
ip link set lo up
echo "VM: kernel $(uname -r) up, $(nproc) CPUs"
PRELUDE
}

# vm_boot WORK KV MEM_MIB CPUS TIMEOUT_S: boots the kernel with WORK/initrd,
# echoes the console from /xbng-init's first line on (kernel lines left out)
# and keeps it whole in WORK/console.log; when the VM printed nothing of
# ours, the console's last lines go to stderr.
vm_boot() {
  local work=$1 kv=$2 mem=$3 cpus=$4 secs=$5
  local accel=${XBNG_QEMU_ACCEL:-tcg}
  timeout "$secs" qemu-system-x86_64 -machine accel="$accel" -m "$mem" -smp "$cpus" \
    -nographic -no-reboot -kernel "/boot/vmlinuz-$kv" -initrd "$work/initrd" \
    -append "console=ttyS0 panic=-1 quiet rdinit=/xbng-init" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    </dev/null | stdbuf -oL tr -d '\r' | tee "$work/console.log" | grep --line-buffered -av '^\[ *[0-9.]*\]' |
    sed -un '/VM: /{s/^.*VM: /VM: /;:a;p;n;ba;}' || true
  grep -aq 'VM: ' "$work/console.log" || tail -n 30 "$work/console.log" >&2
}
