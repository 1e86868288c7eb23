# bash completion for termserver: its commands and flags.
# Generated from termserver's own help by TestCompletionFiles in cmd/termrig
# (go test ./cmd/termrig -run TestCompletionFiles -update); do not edit.
# bash: source this file, or copy it to ~/.local/share/bash-completion/completions/termserver
# zsh:  autoload -U +X bashcompinit && bashcompinit && source this file

_termserver_complete() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} key=""
	[[ $cur == -*=* ]] && return 0 # --flag=value: the shell's own completion
	local words="" files="" dirs="" values=""
	case $key in
	"")
		words="export-sessions --check-config --config --debug-addr --listen --log-level --shutdown-grace --tls-cert --tls-key --unsafe-no-fsync --version"
		files="--check-config --config --tls-cert --tls-key"
		values="--debug-addr --listen --log-level --shutdown-grace"
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
complete -o default -F _termserver_complete termserver
