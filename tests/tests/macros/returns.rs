//! `#[locked]` return types, as the table in the docs says: `Result<T, E>`
//! becomes `Result<Option<T>, E>`, a `Result<T>` alias becomes
//! `Result<Option<T>>`, anything else `T` becomes
//! `Result<Option<T>, lock_core::Error>`.

use std::num::ParseIntError;

use lock_core::{Error, LockManager, locked, registry};

#[derive(Debug)]
enum AppError {
    Lock(Error),
    Parse(ParseIntError),
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        AppError::Lock(error)
    }
}

impl From<ParseIntError> for AppError {
    fn from(error: ParseIntError) -> Self {
        AppError::Parse(error)
    }
}

type AppResult<T> = Result<T, AppError>;

#[locked(ttl = "1m")]
async fn parse(text: &str) -> Result<u32, AppError> {
    if text.is_empty() {
        return Ok(0);
    }
    let number: u32 = text.trim().parse()?;
    Ok(number * 2)
}

#[locked(ttl = "1m")]
async fn parse_alias(text: &str) -> AppResult<u32> {
    Ok(text.parse::<u32>()?)
}

#[locked(ttl = "1m", manager = "macro-returns-never-installed")]
async fn lock_fails() -> Result<u32, AppError> {
    Ok(1)
}

#[locked(ttl = "1m", manager = "macro-returns-never-installed")]
async fn lock_fails_alias() -> AppResult<u32> {
    Ok(1)
}

#[locked(ttl = "1m")]
async fn plain() -> Vec<u8> {
    vec![1, 2]
}

#[locked(ttl = "1m")]
async fn nothing(flag: &std::sync::atomic::AtomicBool) {
    flag.store(true, std::sync::atomic::Ordering::SeqCst);
}

// `return` and `?` in the body must mean what they mean in an unlocked
// function: return from the body with the declared type.
#[tokio::test]
async fn early_return_and_question_mark_in_the_body_keep_their_meaning() {
    registry::with_manager(LockManager::memory(), async {
        let early: Result<Option<u32>, AppError> = parse("").await;
        assert!(matches!(early, Ok(Some(0))), "early return: {early:?}");
        assert!(
            matches!(parse(" 21 ").await, Ok(Some(42))),
            "the body's value"
        );
        let parsed = parse("x").await;
        assert!(
            matches!(&parsed, Err(AppError::Parse(error)) if error.to_string().contains("invalid digit")),
            "`?` converts with the declared error's From: {parsed:?}"
        );
        let alias: AppResult<Option<u32>> = parse_alias("5").await;
        assert!(matches!(alias, Ok(Some(5))), "alias: {alias:?}");
        assert!(
            matches!(parse_alias("x").await, Err(AppError::Parse(_))),
            "`?` in an alias-returning body"
        );
    })
    .await;
}

// Lock failures (here an unknown manager) must arrive as the function's own
// error type, converted with `From`, so callers handle one error type.
#[tokio::test]
async fn a_lock_error_is_converted_into_the_declared_error_type() {
    let error = lock_fails().await.expect_err("the manager is missing");
    assert!(
        matches!(error, AppError::Lock(Error::UnknownManager { .. })),
        "Result<T, E>: got {error:?}"
    );
    let error = lock_fails_alias()
        .await
        .expect_err("the manager is missing");
    assert!(
        matches!(error, AppError::Lock(Error::UnknownManager { .. })),
        "Result<T> alias: got {error:?}"
    );
}

// A function that does not return a Result gets lock_core's error, and one
// that returns nothing still says whether it ran.
#[tokio::test]
async fn a_plain_or_unit_return_becomes_a_result_with_the_lock_error() {
    registry::with_manager(LockManager::memory(), async {
        let value: Result<Option<Vec<u8>>, Error> = plain().await;
        assert_eq!(value.expect("memory store"), Some(vec![1, 2]), "plain T");
        let flag = std::sync::atomic::AtomicBool::new(false);
        let unit: Result<Option<()>, Error> = nothing(&flag).await;
        assert_eq!(unit.expect("memory store"), Some(()), "unit: it ran");
        assert!(
            flag.load(std::sync::atomic::Ordering::SeqCst),
            "the body ran"
        );
    })
    .await;
}
