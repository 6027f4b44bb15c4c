. /tmp/drill_s3/repro/common.sh
EP2=http://127.0.0.1:47451
B=t10b$RUN; mkbucket $B; S3_URL=$EP2 $P $D/plant.py --mkbucket $B
s3_toml $W/s3.toml $B
putn $W/s3.toml orders 30 A
sed "s#$EP#$EP2#" $W/s3.toml > $W/s3b.toml
say "same bucket name, other (empty) endpoint: put --dispatch"
$T put --config $W/s3b.toml --topic orders --body x --dispatch 2>&1 | cut -c1-600; echo rc=$?
say "verify"; $T verify --config $W/s3b.toml 2>&1 | grep -v -e listing: -e walk: | head -20
say "stat"; $T stat --config $W/s3b.toml 2>&1 | head
say "get 0"; $T get --config $W/s3b.toml --topic orders --offset 0 --count 1 2>&1 | head -3
say "objects at endpoint 2"; S3_URL=$EP2 $P $D/snap.py s3 $B | grep '"t/' 
