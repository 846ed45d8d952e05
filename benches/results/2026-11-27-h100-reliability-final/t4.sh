#!/usr/bin/env bash
mkdir -p /tmp/b; [ -x /tmp/b/dfg-new ] || { xz -dc .device/pair.tar.xz | tar xf - -C /tmp/b; chmod +x /tmp/b/dfg-*; }
ln -sf /tmp/b/dfg-new /tmp/b/datafusion-gpu; export PATH=/tmp/b:$PATH DFG_REQUIRE_GPU=1
XDG_CACHE_HOME=/tmp/dfg-cache-cases timeout 200 bash .device/cases-rest.sh 2>&1 | tee $OUT/cases-rest.log
