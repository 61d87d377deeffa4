# Sourced by the Slurm tests: slurm_gpu_host DIR makes in DIR a host tree with the 4 fake GPUs of
# ../shared/tools/slurm-setup.sh (Slurm's gres; their device minors are their indices, as its
# 195:N nodes), on NUMA node 0 with every CPU of this machine, for XMPRUN_HOST_ROOT.
slurm_gpu_host() {
    local host=$1 cpus i pci d
    cpus=$(cat /sys/devices/system/cpu/online)
    mkdir -p "$host/sys/devices/system/cpu" "$host/sys/devices/system/node/node0" "$host/proc/sys/kernel"
    echo "$cpus" >"$host/sys/devices/system/cpu/online"
    echo "$cpus" >"$host/sys/devices/system/node/node0/cpulist"
    hostname >"$host/proc/sys/kernel/hostname"
    for i in 0 1 2 3; do
        pci=0000:1$i:00.0
        mkdir -p "$host/proc/driver/nvidia/gpus/$pci" "$host/sys/bus/pci/devices/$pci"
        printf 'Model: \t\t Fake GPU\nGPU UUID: \t GPU-00000000-0000-4000-8000-00000000000%d\nBus Location: \t %s\nDevice Minor: \t %d\n' \
            "$i" "$pci" "$i" >"$host/proc/driver/nvidia/gpus/$pci/information"
        d=$host/sys/bus/pci/devices/$pci
        echo 0x10de >"$d/vendor"; echo 0x2330 >"$d/device"; echo 0x030200 >"$d/class"
        echo 0 >"$d/numa_node"; echo "$cpus" >"$d/local_cpulist"
    done
}
