cd ab

for i in 1 2 3; do PYTHONPATH=a timeout 40 python3 host_pin.py free$i; done
N=$(nproc)
for c in 0 1 $((N/2)) $((N-1)); do PYTHONPATH=a timeout 40 taskset -c $c python3 host_pin.py cpu$c; done
PYTHONPATH=a timeout 40 taskset -c 0-$((N/2-1)) python3 host_pin.py lowhalf
PYTHONPATH=a timeout 40 taskset -c $((N/2))-$((N-1)) python3 host_pin.py highhalf
