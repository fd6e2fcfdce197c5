# Environment for @zed-industries/claude-code-acp@0.16.2 against a local Anthropic-Messages server.
# Usage: H=/private/home BASE=http://127.0.0.1:18080 MODEL=stub-model . env.sh; exec claude-code-acp
export HOME="$H" XDG_CONFIG_HOME="$H/.config" XDG_CACHE_HOME="$H/.cache" XDG_DATA_HOME="$H/.local/share" XDG_STATE_HOME="$H/.local/state"
export CLAUDE_CONFIG_DIR="$H/.claude"
export ANTHROPIC_BASE_URL="$BASE" ANTHROPIC_API_KEY=sk-ant-local-placeholder
export ANTHROPIC_MODEL="$MODEL" ANTHROPIC_SMALL_FAST_MODEL="$MODEL" ANTHROPIC_DEFAULT_HAIKU_MODEL="$MODEL" ANTHROPIC_DEFAULT_SONNET_MODEL="$MODEL" ANTHROPIC_DEFAULT_OPUS_MODEL="$MODEL"
export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_BUG_COMMAND=1 CLAUDE_CODE_DISABLE_FAST_MODE=1 CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1
# As root: the adapter offers bypassPermissions when IS_SANDBOX is set to anything, but the CLI
# only accepts IS_SANDBOX=1 and exits otherwise ("--dangerously-skip-permissions cannot be used with root").
unset IS_SANDBOX
# Loopback must bypass any proxy (no default loopback bypass):
export NO_PROXY="127.0.0.1,localhost${NO_PROXY:+,$NO_PROXY}" no_proxy="127.0.0.1,localhost${no_proxy:+,$no_proxy}"
