# Bash completion for troupe (installed as share/bash-completion/completions/troupe):
# the subcommands, then the flags of the one chosen and the choices a flag takes, both
# read from that subcommand's --help, so they never drift from the binary; file names
# after the flags that take a path.
_troupe_help() {
  # The --help text of "$@" (a subcommand path) of the troupe being completed.
  "$_troupe_bin" "$@" --help 2>/dev/null
}

_troupe() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
  _troupe_bin=${COMP_WORDS[0]}
  local path=() i word
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    [[ $word == -* ]] && continue
    # a word is a subcommand only where the help lists it under "Subcommands:"
    if _troupe_help "${path[@]}" | sed -n '/^Subcommands:/,$p' | grep -qE "^  $word( |$)"; then
      path+=("$word")
    fi
  done
  case $prev in
    --config | --trace | --data | --hostfile | --job-dir | --remote-dir | --tls-dir | --tls-cert | --tls-key | \
      --tls-ca | --tls-passphrase-file | --secret-file | --prometheus-config | --save-model | --troupe)
      COMPREPLY=($(compgen -f -- "$cur"))
      return
      ;;
  esac
  local help
  help=$(_troupe_help "${path[@]}")
  if [[ $prev == --* && $cur != -* ]]; then
    # "  --mode TEXT:{sync,async,ssp}=async": the choices of the flag before the cursor
    local choices
    choices=$(printf '%s\n' "$help" | grep -E -- "^ +(-[a-z],)?$prev(,[^ ]*)? [A-Z]+:\{" | sed -E 's/.*:\{([^}]*)\}.*/\1/' |
      tr ',' ' ')
    if [[ -n $choices ]]; then
      COMPREPLY=($(compgen -W "$choices" -- "$cur"))
      return
    fi
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(printf '%s\n' "$help" | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u)" -- "$cur"))
    return
  fi
  local subs
  subs=$(printf '%s\n' "$help" | sed -n '/^Subcommands:/,$p' | sed -n -E 's/^  ([a-z][a-z0-9-]*) .*/\1/p')
  COMPREPLY=($(compgen -W "$subs" -- "$cur"))
}
complete -o default -F _troupe troupe
