#!/bin/sh
# hami-vgpu-init: installs HAMi-core on a GPU node.
#
# The chart runs it as the device plugin's init container with the node's
# <hook-path>/vgpu directory mounted at DEST_DIR. It copies the libraries shipped
# in the image (libvgpu.so) there and writes DEST_DIR/ld.so.preload naming
# PRELOAD_LIB (default DEST_DIR/libvgpu.so: the path where the device plugin
# mounts the library inside GPU containers). The device plugin mounts that file
# over /etc/ld.so.preload in every GPU container, so HAMi-core is loaded without
# the workload setting LD_PRELOAD.
#
# Files are replaced by rename, never rewritten in place: running containers
# have the old library bind-mounted and mapped and must keep their inode.
# Files whose content is already right are left alone, so a restart is a no-op.
#
# Environment: HAMI_CORE_LIB_DIR (where the image keeps the libraries, default
# /k8s-vgpu/lib/nvidia), HAMI_VGPU_LOCK_DIR (HAMi-core's cross-container lock
# directory; made world-writable when it exists, default /tmp/vgpulock).
set -eu

prog=hami-vgpu-init

usage() {
    echo "usage: $prog DEST_DIR [PRELOAD_LIB]" >&2
    exit 64
}

if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then
    usage
fi
dest=$1
preload_lib=${2:-$dest/libvgpu.so}
src=${HAMI_CORE_LIB_DIR:-/k8s-vgpu/lib/nvidia}
lock_dir=${HAMI_VGPU_LOCK_DIR:-/tmp/vgpulock}

if [ ! -s "$src/libvgpu.so" ]; then
    echo "$prog: $src/libvgpu.so is missing or empty; the image was built without HAMi-core" >&2
    exit 1
fi
case $preload_lib in
    /*) ;;
    *)
        echo "$prog: PRELOAD_LIB must be an absolute path, got '$preload_lib'" >&2
        exit 64
        ;;
esac

mkdir -p "$dest/containers"

tmp=
preload_new=
cleanup() {
    for f in "$tmp" "$preload_new"; do
        if [ -n "$f" ]; then
            rm -f "$f"
        fi
    done
}
trap cleanup EXIT

# install_file SRC DST MODE: put SRC's content at DST (atomically) unless it is
# already there.
install_file() {
    if [ -f "$2" ] && cmp -s "$1" "$2"; then
        echo "$prog: $2 is up to date"
        return 0
    fi
    tmp="$2.tmp.$$"
    cp "$1" "$tmp"
    chmod "$3" "$tmp"
    mv -f "$tmp" "$2"
    tmp=
    echo "$prog: installed $2"
}

for lib in "$src"/*; do
    if [ -f "$lib" ]; then
        install_file "$lib" "$dest/${lib##*/}" 0755
    fi
done

preload_new="$dest/.ld.so.preload.$$"
printf '%s\n' "$preload_lib" >"$preload_new"
install_file "$preload_new" "$dest/ld.so.preload" 0644
rm -f "$preload_new"
preload_new=

if [ -d "$lock_dir" ]; then
    # Containers of any uid take HAMi-core's locks here; sticky like /tmp.
    chmod 1777 "$lock_dir"
fi

echo "$prog: HAMi-core ready in $dest (preload: $preload_lib)"
