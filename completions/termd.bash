# bash completion for termd: its commands and flags.
# Generated from termd's own help by TestCompletionFiles in cmd/termrig
# (go test ./cmd/termrig -run TestCompletionFiles -update); do not edit.
# bash: source this file, or copy it to ~/.local/share/bash-completion/completions/termd
# zsh:  autoload -U +X bashcompinit && bashcompinit && source this file

_termd_complete() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} key=""
	[[ $cur == -*=* ]] && return 0 # --flag=value: the shell's own completion
	local words="" files="" dirs="" values=""
	case $key in
	"")
		words="--backlight-off-after --board --board-file --ca-file --cert --channel --device-name --enroll --idle-seconds --idle-text --key --log-file --log-level --peer-id --release-key --server --server-fallback --server-name --state-dir --stream --supervise --tag --token-file --update-gate --version"
		files="--board-file --ca-file --cert --key --log-file --release-key --token-file"
		dirs="--state-dir"
		values="--backlight-off-after --board --channel --device-name --idle-seconds --idle-text --log-level --peer-id --server --server-fallback --server-name --tag --update-gate"
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
complete -o default -F _termd_complete termd
