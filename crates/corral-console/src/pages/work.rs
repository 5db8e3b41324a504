//! Work in a sandbox (`handlers::work`): one command's page and one file's page.

use maud::{Markup, html};

use super::layout::{command_badge, csrf_field, files_card, paths, shell};
use crate::view::*;

/// One command: its facts and its output, followed live by the script while it runs.
pub(crate) fn command_page(page: &CommandPageView) -> Markup {
    let p = &page.project;
    let c = &page.row;
    let sandbox_href = paths::sandbox(&p.account.id, &p.id, &page.sandbox);
    let content = html! {
        div.page-head {
            div {
                div.crumbs {
                    span { a href=(paths::project(&p.account.id, &p.id)) { (p.name) } }
                    span { a href=(sandbox_href) { (page.sandbox) } }
                    span { "Commands" }
                }
                h1 { code.h1-code { (c.command) } }
            }
            div #command-state { (command_badge(&c.state)) }
        }
        @if page.can_stop {
            form.inline #command-stop method="post" action={(paths::command(&p.account.id, &p.id, &page.sandbox, &c.id)) "/signal"} {
                (csrf_field(&page.chrome.csrf))
                button.btn.secondary type="submit" name="signal" value="TERM" #stop { "Stop (TERM)" }
                button.btn.danger type="submit" name="signal" value="KILL" #kill { "Kill" }
            }
        }
        @if let Some(offset) = page.stdin_offset {
            div.card { div.card-body {
                form.stack #command-stdin method="post" action={(paths::command(&p.account.id, &p.id, &page.sandbox, &c.id)) "/stdin"} {
                    (csrf_field(&page.chrome.csrf))
                    // Where this form's text goes in the stream: sent twice (a resent form),
                    // it is written once.
                    input type="hidden" name="offset" value=(offset);
                    div.field {
                        label for="stdin-data" { "Input" }
                        textarea #stdin-data.mono name="data" rows="3" autocomplete="off" spellcheck="false" {}
                    }
                    label.check for="stdin-newline" {
                        input #stdin-newline type="checkbox" name="newline" value="1" checked;
                        span { "End with a newline" }
                    }
                    label.check for="stdin-close" {
                        input #stdin-close type="checkbox" name="close" value="1";
                        span { "Close its input after this (end of file)" }
                    }
                    div { button.btn.secondary type="submit" #send-stdin { "Send" } }
                }
            } }
        }
        div.card { div.card-body {
            dl.facts {
                dt { "Command" } dd { code { (c.id) } }
                dt { "Started" } dd { (c.started) }
                dt { "Ended" } dd #command-ended { (page.ended.as_deref().unwrap_or("—")) }
                dt { "Duration" } dd #command-duration { (c.duration) }
                dt { "Exit code" } dd #exit-code { @match c.exit_code { Some(code) => (code), None => "—" } }
            }
        } }
        div.card {
            div.card-head { div { h2 { "Output" } @if page.follow.is_some() { p #follow-hint { "Still running: reload the page to see more output." } } } }
            @if page.truncated {
                div.card-body { p.muted { "Only the beginning of the output is shown here; read the rest through the API." } }
            }
            pre #output.output tabindex="0" aria-label="Output" aria-live="polite"
                data-stream=[page.follow.as_ref().map(|f| &f.0)]
                data-after=[page.follow.as_ref().map(|f| f.1)] {
                @for chunk in &page.output {
                    @match chunk {
                        OutputChunk::Stdout(t) => (t),
                        OutputChunk::Stderr(t) => span.stderr { (t) },
                        OutputChunk::Gap(n) => span.gap {
                            "["
                            @if let Some(n) = n { (n) " bytes" } @else { "some output" }
                            " lost]\n"
                        },
                    }
                }
            }
        }
        a href=(sandbox_href) { "← The sandbox" }
    };
    shell(
        &format!("{} · {}", c.id, page.sandbox),
        &page.chrome,
        content,
    )
}

/// A file of a sandbox: what was read, and the forms to read another or write it.
pub(crate) fn file_page(page: &FilePage) -> Markup {
    let p = &page.project;
    let content = html! {
        div.page-head {
            div {
                div.crumbs {
                    span { a href=(paths::project(&p.account.id, &p.id)) { (p.name) } }
                    span { a href=(paths::sandbox(&p.account.id, &p.id, &page.sandbox)) { (page.sandbox) } }
                    span { "Files" }
                }
                h1 { code.h1-code { (page.path) } }
            }
        }
        @match &page.content {
            Ok(text) => div.card {
                div.card-head { div { h2 { "Content" } } }
                pre #file-content.output tabindex="0" aria-label="File content" { (text) }
            },
            Err(why) => div #file-error.flash.error role="alert" { (why) },
        }
        (files_card(&p.account.id, &p.id, &page.sandbox, &page.path, page.content.as_ref().ok().map(String::as_str), page.can_work, &page.chrome.csrf))
        a href=(paths::sandbox(&p.account.id, &p.id, &page.sandbox)) { "← The sandbox" }
    };
    shell(
        &format!("{} · {}", page.path, page.sandbox),
        &page.chrome,
        content,
    )
}
