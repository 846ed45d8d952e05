#!/usr/bin/env bash
# Sourced by the device scripts: unpacks the binaries that ../shared/tools/device-pack carried in
# .device/ into /tmp/b (on PATH), and makes sure the loader finds NVRTC (cudarc opens
# libnvrtc.so.13 by name).
mkdir -p /tmp/b && for f in .device/bin/*.xz; do xz -dc "$f" > "/tmp/b/$(basename "$f" .xz)"; chmod +x "/tmp/b/$(basename "$f" .xz)"; done
export PATH=/tmp/b:$PATH
if ! ldconfig -p | grep -q 'libnvrtc.so'; then
    d=$(dirname "$(find / -xdev -name 'libnvrtc.so*' -path '*13*' 2>/dev/null | head -1)" 2>/dev/null)
    [ -z "$d" ] && d=$(dirname "$(find / -xdev -name 'libnvrtc.so*' 2>/dev/null | head -1)" 2>/dev/null)
    [ -n "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
fi
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
