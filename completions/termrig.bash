# bash completion for termrig: its commands and flags.
# Generated from termrig's own help by TestCompletionFiles in cmd/termrig
# (go test ./cmd/termrig -run TestCompletionFiles -update); do not edit.
# bash: source this file, or copy it to ~/.local/share/bash-completion/completions/termrig
# zsh:  autoload -U +X bashcompinit && bashcompinit && source this file

_termrig_complete() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} key=""
	[[ $cur == -*=* ]] && return 0 # --flag=value: the shell's own completion
	((COMP_CWORD >= 2)) && key=${COMP_WORDS[1]}
	case $key in release|device) ((COMP_CWORD >= 3)) && key="$key ${COMP_WORDS[2]}" ;; esac
	local words="" files="" dirs="" values=""
	case $key in
	"")
		words="chaos cluster demo device enroll-test gpio-loopback i2c-scan keypad-test lcd-test link-test load release selftest serial-loopback help --help --version"
		;;
	"help")
		words="chaos cluster demo device enroll-test gpio-loopback i2c-scan keypad-test lcd-test link-test load release selftest serial-loopback"
		;;
	"chaos")
		words="--control --latency --listen --mode --repeat --schedule --target --v"
		values="--control --latency --listen --mode --repeat --schedule --target"
		;;
	"cluster")
		words="--agent --debug-addr --dir --edges --nats --nodes --partitions --replicas --sync-always --workers"
		dirs="--dir"
		values="--agent --debug-addr --edges --nats --nodes --partitions --replicas --workers"
		;;
	"demo")
		words="--agent --backlight-off-after --console --idle-seconds --keypad --kiosk --stream --workspace"
		dirs="--workspace"
		values="--agent --backlight-off-after --idle-seconds"
		;;
	"device")
		words="logs selftest settings"
		;;
	"device logs")
		words="--admin-token-file --bytes --channel --peer --server"
		files="--admin-token-file"
		values="--bytes --channel --peer --server"
		;;
	"device selftest")
		words="--admin-token-file --channel --json --peer --server"
		files="--admin-token-file"
		values="--channel --peer --server"
		;;
	"device settings")
		words="--admin-token-file --backlight-off-after --channel --delete --idle-seconds --idle-text --log-level --notice-seconds --peer --server --set-tag --show --tag --unknown-ok"
		files="--admin-token-file"
		values="--backlight-off-after --channel --idle-seconds --idle-text --log-level --notice-seconds --peer --server --set-tag --tag"
		;;
	"enroll-test")
		words="--admin-token-file --approve --channel --peer-id --server --timeout"
		files="--admin-token-file"
		values="--channel --peer-id --server --timeout"
		;;
	"gpio-loopback")
		words="--in --json --out --sim --timeout --toggles"
		values="--in --out --timeout --toggles"
		;;
	"i2c-scan")
		words="--bus --expect --json --sim"
		values="--bus --expect"
		;;
	"keypad-test")
		words="--board --board-file --json --sim --stuck-after --timeout"
		files="--board-file"
		values="--board --stuck-after --timeout"
		;;
	"lcd-test")
		words="--addr --board --board-file --bus --frames --hold --json --rom --sim --size"
		files="--board-file"
		values="--addr --board --bus --frames --hold --rom --size"
		;;
	"link-test")
		words="--ca-file --cert --channel --json --key --no-echo --peer-id --pings --server --sim --timeout --token"
		files="--ca-file --cert --key"
		values="--channel --peer-id --pings --server --timeout --token"
		;;
	"load")
		words="--ca-file --channel --client --connect-rate --connect-timeout --devices --drain --duration --hold --json --latency-log --move --outbox --peer-prefix --rate --report-reconnects --server --server-pid --stream --text --token --v"
		files="--ca-file --latency-log --report-reconnects"
		values="--channel --connect-rate --connect-timeout --devices --drain --duration --move --outbox --peer-prefix --rate --server --server-pid --text --token"
		;;
	"release")
		words="abort delete delta keygen list pause resume rollout sign status upload verify"
		;;
	"release abort")
		words="--admin-token-file --channel --server"
		files="--admin-token-file"
		values="--channel --server"
		;;
	"release delete")
		words="--admin-token-file --platform --server --version"
		files="--admin-token-file"
		values="--platform --server --version"
		;;
	"release delta")
		words="--from --key --out --to"
		values="--from --key --out --to"
		;;
	"release keygen")
		words="--out"
		dirs="--out"
		;;
	"release list")
		words="--admin-token-file --server --version"
		files="--admin-token-file"
		values="--server --version"
		;;
	"release pause")
		words="--admin-token-file --channel --server"
		files="--admin-token-file"
		values="--channel --server"
		;;
	"release resume")
		words="--admin-token-file --channel --retry --server"
		files="--admin-token-file"
		values="--channel --server"
		;;
	"release rollout")
		words="--admin-token-file --all --allow-downgrade --canary --channel --force --gate-seconds --peers --percent --server --tag --version --window --zone"
		files="--admin-token-file"
		values="--canary --channel --gate-seconds --peers --percent --server --tag --version --window --zone"
		;;
	"release sign")
		words="--key --platform --version"
		values="--key --platform --version"
		;;
	"release status")
		words="--admin-token-file --channel --every --server --version --watch"
		files="--admin-token-file"
		values="--channel --every --server --version"
		;;
	"release upload")
		words="--admin-token-file --server --timeout"
		files="--admin-token-file"
		values="--server --timeout"
		;;
	"release verify")
		words="--pub"
		values="--pub"
		;;
	"selftest")
		words="--baud --board --board-file --ca-file --cert --gpio-in --gpio-out --hold --interactive --json --key --keypad-timeout --serial-port --server --sim --token --v"
		files="--board-file --ca-file --cert --key"
		values="--baud --board --gpio-in --gpio-out --hold --keypad-timeout --serial-port --server --token"
		;;
	"serial-loopback")
		words="--baud --bytes --json --port --seed --sim"
		values="--baud --bytes --port --seed"
		;;
	esac
	if [[ " $files " == *" $prev "* ]]; then
		return 0 # a file name: the shell's own completion
	elif [[ " $dirs " == *" $prev "* ]]; then
		local IFS=$'\n' # a directory's name may hold spaces
		COMPREPLY=($(compgen -d -- "$cur"))
		return 0
	elif [[ " $values " == *" $prev "* ]]; then
		compopt +o default 2>/dev/null # a value: nothing to offer
		return 0
	fi
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _termrig_complete termrig
