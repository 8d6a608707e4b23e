# Runs each case with a runner (argv: the runner command) in a fresh directory and prints
# the exit status, stderr and every log, with dates and times normalised.
runner="$1"
cases=(
  'JOB=1:3 log/a.JOB.log echo "a b" '"'"'say "x"'"'"' JOB \| tr a-z A-Z'
  '--max-jobs-run 2 JOB=2:4 log/b.JOB.log test JOB -ne 3'
  '--mem 2G --num-threads 4 -q all.q JOB=2:4 log/c.JOB.log test JOB -ne 3'
  'JOB=3 log/d.JOB.log false'
  'log/e.log echo one \; false'
  'JOB=1:2 log/f.log true'
  'JOB=1:2 log/g.JOB.log sh -c "kill -9 \$\$"'
  'JOB=1:2 log/h.JOB.log echo JOBS are JOB \> log/h.out.JOB'
  'JOB=3:1 log/i.JOB.log true'
  'JOB=0:1 log/i.JOB.log true'
  'x'
)
for c in "${cases[@]}"; do
  d=$(mktemp -d); ( cd $d; echo "=== $c"; eval "$runner $c" 2> err; echo "rc=$?"
    sed -e 's/ at \/.* line [0-9]*\.$//' err
    for f in $(find log -type f 2>/dev/null | sort); do echo "--- $f"; sed -E -e 's/(Started|Ended \(.*\)) at .* UTC [0-9]{4}/\1 at DATE/' -e 's/time=[0-9]+/time=T/' -e 's/elapsed time [0-9]+/elapsed time T/' $f; done ); rm -rf $d
done
