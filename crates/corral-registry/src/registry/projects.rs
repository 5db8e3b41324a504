//! Projects: created, renamed, read and listed.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::{run, to_micros};
use crate::error::{RegistryError, Result, db_error};
use crate::model::{Project, ProjectId};
use crate::rows::ProjectRow;
use crate::schema::projects;

use super::Registry;

fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name.chars().count() > 255 || name.chars().any(char::is_control) {
        return Err(RegistryError::InvalidInput {
            message: "a project name is 1–255 characters without control characters".to_owned(),
        });
    }
    Ok(())
}

impl Registry {
    /// Creates a project; the name (1–255 characters, no control characters) must be unused
    /// ([`RegistryError::Conflict`] otherwise).
    pub async fn create_project(&self, name: &str) -> Result<Project> {
        validate_name(name)?;
        let row = ProjectRow {
            id: ProjectId::new().to_string(),
            name: name.to_owned(),
            created_at: to_micros(self.db.now()),
        };
        let project = ProjectRow {
            id: row.id.clone(),
            name: row.name.clone(),
            created_at: row.created_at,
        }
        .into_project()?;
        run!(self, |c| {
            diesel::insert_into(projects::table)
                .values(&row)
                .execute(c)
                .await
                .map_err(|e| match db_error(e) {
                    RegistryError::Conflict { .. } => RegistryError::Conflict {
                        what: "project name",
                    },
                    other => other,
                })
        })?;
        Ok(project)
    }

    /// Renames a project; the new name follows [`Registry::create_project`]'s rules and must
    /// be unused ([`RegistryError::Conflict`]); [`RegistryError::NotFound`] when there is no
    /// such project. Keys, profiles and sandboxes refer to the id, so nothing else changes.
    pub async fn rename_project(&self, id: ProjectId, name: &str) -> Result<Project> {
        validate_name(name)?;
        let (key, new_name) = (id.to_string(), name.to_owned());
        let renamed = run!(self, |c| {
            diesel::update(projects::table.filter(projects::id.eq(&key)))
                .set(projects::name.eq(&new_name))
                .execute(c)
                .await
                .map_err(|e| match db_error(e) {
                    RegistryError::Conflict { .. } => RegistryError::Conflict {
                        what: "project name",
                    },
                    other => other,
                })
        })?;
        if renamed == 0 {
            return Err(RegistryError::NotFound { what: "project" });
        }
        self.project(id).await
    }

    /// The project with this id ([`RegistryError::NotFound`] if none).
    pub async fn project(&self, id: ProjectId) -> Result<Project> {
        let id = id.to_string();
        let row: Option<ProjectRow> = run!(self, |c| {
            projects::table
                .filter(projects::id.eq(&id))
                .select(ProjectRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.ok_or(RegistryError::NotFound { what: "project" })?
            .into_project()
    }

    /// The project with this name ([`RegistryError::NotFound`] if none).
    pub async fn project_by_name(&self, name: &str) -> Result<Project> {
        let name = name.to_owned();
        let row: Option<ProjectRow> = run!(self, |c| {
            projects::table
                .filter(projects::name.eq(&name))
                .select(ProjectRow::as_select())
                .first(c)
                .await
                .optional()
                .map_err(db_error)
        })?;
        row.ok_or(RegistryError::NotFound { what: "project" })?
            .into_project()
    }

    /// Every project, oldest first.
    pub async fn list_projects(&self) -> Result<Vec<Project>> {
        let rows: Vec<ProjectRow> = run!(self, |c| {
            projects::table
                .order((projects::created_at.asc(), projects::id.asc()))
                .select(ProjectRow::as_select())
                .load(c)
                .await
                .map_err(db_error)
        })?;
        rows.into_iter().map(ProjectRow::into_project).collect()
    }
}
