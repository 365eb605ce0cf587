//! Channels that answer without an environment: a dry run's, and tests'.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Answers as a channel in which every start ends at once with status 0,
/// as a dry run's environment does ([`answer_as_channel`]).
///
/// # Errors
/// When a stream cannot be read or written.
pub async fn answer_as_dry_channel(
    stdin: &mut (dyn AsyncRead + Send + Unpin),
    stdout: &mut (dyn AsyncWrite + Send + Unpin),
    stderr: &mut (dyn AsyncWrite + Send + Unpin),
) -> std::io::Result<()> {
    answer_as_channel(stdin, stdout, stderr, 0).await
}

/// Answers as a channel in which every start ends at once with `status`,
/// as a fake environment does: each message read from `stdin` gets the
/// begin and end marks of its key on both streams and its done notice,
/// until `stdin` ends or holds something else.
///
/// # Errors
/// When a stream cannot be read or written.
pub async fn answer_as_channel(
    stdin: &mut (dyn AsyncRead + Send + Unpin),
    stdout: &mut (dyn AsyncWrite + Send + Unpin),
    stderr: &mut (dyn AsyncWrite + Send + Unpin),
    status: u8,
) -> std::io::Result<()> {
    let mut reader = tokio::io::BufReader::new(stdin);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let Ok(n) = line.trim_end().parse::<usize>() else {
            return Ok(());
        };
        let mut command = vec![0u8; n];
        reader.read_exact(&mut command).await?;
        let command = String::from_utf8_lossy(&command);
        let Some(line) = command.strip_suffix("\n#knotless-end") else {
            return Ok(());
        };
        let key = super::message_key(line);
        let marks = [
            crate::detached::BEGIN_MARK,
            &crate::detached::end_mark(key, status),
        ]
        .concat();
        stdout.write_all(&marks).await?;
        stderr.write_all(&marks).await?;
        let done = [super::DONE, format!("{status:03} {key}\n").as_bytes()].concat();
        stdout.write_all(&done).await?;
    }
}
