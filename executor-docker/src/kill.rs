//! Killing a step inside a container: there is no kill-exec call, so the
//! runner finds the step's shell by the pid it wrote and kills its tree.

use crate::executor::shell_quote;

/// A POSIX sh script that SIGKILLs the process in `pid_file` and every
/// descendant, found through `/proc/*/stat`. The root is stopped first so it
/// cannot fork while the tree is gathered.
pub(crate) fn kill_tree_script(pid_file: &str) -> String {
    format!(
        r#"root=$(cat {file} 2>/dev/null) || exit 0
[ -n "$root" ] || exit 0
kill -STOP "$root" 2>/dev/null || exit 0
all="$root"; frontier="$root"
while [ -n "$frontier" ]; do
  next=""
  for stat in /proc/[0-9]*/stat; do
    read -r line < "$stat" 2>/dev/null || continue
    rest=${{line##*) }}
    set -- $rest
    for p in $frontier; do
      if [ "$2" = "$p" ]; then pid=${{stat#/proc/}}; next="$next ${{pid%/stat}}"; fi
    done
  done
  all="$all $next"; frontier="$next"
done
kill -KILL $all 2>/dev/null
rm -f {file}
exit 0"#,
        file = shell_quote(pid_file)
    )
}
